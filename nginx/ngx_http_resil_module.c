/* SPDX-License-Identifier: MIT */
/*
 * ngx_http_resil_module.c - resil's policies in nginx, as a dynamic
 * module: one circuit breaker, rate limit or bulkhead for every worker of
 * every nginx host, decided in each worker's shared memory by libresil.
 *
 *   resil_socket PATH;                 (http)
 *   resil_policy NAME "CONFIG";        (http: a declaration, resil_define)
 *   resil NAME [key=$var] [outcome=upstream|none];  (http, server, location)
 *   resil_status_limited CODE;         (429)
 *   resil_status_rejected CODE;        (503)
 *   resil_dry_run on|off;              (decide and count, never refuse)
 *   resil_log_level info|notice|warn|error;  (refusals; error)
 *   $resil_verdict                     (admit, limited, open, full, shed,
 *                                       budget, error, dry-run:...)
 *
 * This half reads the configuration and owns the worker's handle; the
 * request's half is ngx_http_resil_request.c.
 *
 * Configuration time (the master, and nginx -t): every declaration is
 * checked as resil_define takes it (resil_config_check), and one whose
 * acquire may sleep (bulkhead.wait, limit.wait) is refused: a worker's
 * event loop never waits. A policy the files of resild declare is only
 * named here; nothing is asked of resild before a worker runs.
 *
 * Each worker (init_process, never the master: a handle is a process's
 * own, with its client row) opens a pending handle (RESIL_OPEN_PENDING):
 * nginx starts and serves while resild is away, each policy deciding by
 * its policy.fallback, and the library attaches to resild in the
 * background of a decision (a look at most once a second, never a wait)
 * and follows its restarts. The worker then declares the policies of
 * resil_policy (resild keeps its files' and its operators' word over a
 * declaration) and takes a handle for every name a `resil` uses.
 *
 * Nothing here is shared memory: libresil owns every shared word, and a
 * worker's handle and handles (ngx_http_resil_worker) are that process's
 * alone, written by its one thread: in init_process, in the tick (once a
 * second, below) and in exit_process.
 */
#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ngx_http_resil.h"

ngx_http_resil_worker_t ngx_http_resil_worker;

static ngx_int_t ngx_http_resil_add_variables(ngx_conf_t *cf);
static ngx_int_t ngx_http_resil_init(ngx_conf_t *cf);
static void *ngx_http_resil_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_resil_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_resil_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_resil_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child);
static char *ngx_http_resil_policy(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_http_resil(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static ngx_int_t ngx_http_resil_init_process(ngx_cycle_t *cycle);
static void ngx_http_resil_exit_process(ngx_cycle_t *cycle);

static ngx_conf_num_bounds_t ngx_http_resil_status_bounds = {ngx_conf_check_num_bounds, 400, 599};

static ngx_conf_enum_t ngx_http_resil_log_levels[] = {{ngx_string("info"), NGX_LOG_INFO},
						      {ngx_string("notice"), NGX_LOG_NOTICE},
						      {ngx_string("warn"), NGX_LOG_WARN},
						      {ngx_string("error"), NGX_LOG_ERR},
						      {ngx_null_string, 0}};

static ngx_command_t ngx_http_resil_commands[] = {
    {ngx_string("resil_socket"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, ngx_conf_set_str_slot,
     NGX_HTTP_MAIN_CONF_OFFSET, offsetof(ngx_http_resil_main_conf_t, socket), NULL},

    {ngx_string("resil_policy"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE2, ngx_http_resil_policy,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, NULL},

    {ngx_string("resil"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE123, ngx_http_resil,
     NGX_HTTP_LOC_CONF_OFFSET, 0, NULL},

    {ngx_string("resil_status_limited"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_num_slot, NGX_HTTP_LOC_CONF_OFFSET,
     offsetof(ngx_http_resil_loc_conf_t, status_limited), &ngx_http_resil_status_bounds},

    {ngx_string("resil_status_rejected"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_num_slot, NGX_HTTP_LOC_CONF_OFFSET,
     offsetof(ngx_http_resil_loc_conf_t, status_rejected), &ngx_http_resil_status_bounds},

    {ngx_string("resil_dry_run"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_FLAG,
     ngx_conf_set_flag_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(ngx_http_resil_loc_conf_t, dry_run),
     NULL},

    {ngx_string("resil_log_level"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_enum_slot, NGX_HTTP_LOC_CONF_OFFSET,
     offsetof(ngx_http_resil_loc_conf_t, log_level), &ngx_http_resil_log_levels},

    ngx_null_command};

static ngx_http_module_t ngx_http_resil_module_ctx = {
    ngx_http_resil_add_variables,    /* preconfiguration */
    ngx_http_resil_init,	     /* postconfiguration */
    ngx_http_resil_create_main_conf, /* create main configuration */
    ngx_http_resil_init_main_conf,   /* init main configuration */
    NULL,			     /* create server configuration */
    NULL,			     /* merge server configuration */
    ngx_http_resil_create_loc_conf,  /* create location configuration */
    ngx_http_resil_merge_loc_conf    /* merge location configuration */
};

ngx_module_t ngx_http_resil_module = {NGX_MODULE_V1,
				      &ngx_http_resil_module_ctx,  /* module context */
				      ngx_http_resil_commands,	   /* module directives */
				      NGX_HTTP_MODULE,		   /* module type */
				      NULL,			   /* init master */
				      NULL,			   /* init module */
				      ngx_http_resil_init_process, /* init process */
				      NULL,			   /* init thread */
				      NULL,			   /* exit thread */
				      ngx_http_resil_exit_process, /* exit process */
				      NULL,			   /* exit master */
				      NGX_MODULE_V1_PADDING};

/* ------------------------------------------------------------ $resil_verdict */

/* By NGX_HTTP_RESIL_*, then the same as a dry run's. */
ngx_str_t ngx_http_resil_verdict_names[2 * NGX_HTTP_RESIL_NVERDICTS] = {
    ngx_null_string,
    ngx_string("admit"),
    ngx_string("limited"),
    ngx_string("open"),
    ngx_string("full"),
    ngx_string("shed"),
    ngx_string("budget"),
    ngx_string("error"),
    ngx_null_string,
    ngx_string("admit"),
    ngx_string("dry-run:limited"),
    ngx_string("dry-run:open"),
    ngx_string("dry-run:full"),
    ngx_string("dry-run:shed"),
    ngx_string("dry-run:budget"),
    ngx_string("error"),
};

/* The access phase writes the request's verdict into the variable's slot
 * (ngx_http_resil_request.c); a slot it did not write is nothing. */
static ngx_int_t ngx_http_resil_verdict_variable(ngx_http_request_t *r,
						 ngx_http_variable_value_t *v, uintptr_t data)
{
	v->not_found = 1;
	return NGX_OK;
}

static ngx_int_t ngx_http_resil_add_variables(ngx_conf_t *cf)
{
	static ngx_str_t name = ngx_string("resil_verdict");
	ngx_http_variable_t *var;

	var = ngx_http_add_variable(cf, &name, 0);
	if (var == NULL)
		return NGX_ERROR;
	var->get_handler = ngx_http_resil_verdict_variable;
	return NGX_OK;
}

/* ------------------------------------------------------------ configuration */

static void *ngx_http_resil_create_main_conf(ngx_conf_t *cf)
{
	ngx_http_resil_main_conf_t *mcf = ngx_pcalloc(cf->pool, sizeof(*mcf));

	if (mcf == NULL)
		return NULL;
	if (ngx_array_init(&mcf->decls, cf->pool, 4, sizeof(ngx_http_resil_decl_t)) != NGX_OK ||
	    ngx_array_init(&mcf->names, cf->pool, 4, sizeof(ngx_str_t)) != NGX_OK)
		return NULL;
	return mcf;
}

/* resil_socket's default, read now: nginx gives its workers an environment
 * of its own (the env directive), not the one it was started with. */
static char *ngx_http_resil_init_main_conf(ngx_conf_t *cf, void *conf)
{
	ngx_http_resil_main_conf_t *mcf = conf;
	const char *env;

	if (mcf->socket.len)
		return NGX_CONF_OK;
	env = getenv("RESIL_SOCKET");
	if (env == NULL || *env == '\0')
		return NGX_CONF_OK; /* the library's default */
	mcf->socket.len = ngx_strlen(env);
	mcf->socket.data = ngx_pnalloc(cf->pool, mcf->socket.len + 1);
	if (mcf->socket.data == NULL)
		return NGX_CONF_ERROR;
	ngx_memcpy(mcf->socket.data, env, mcf->socket.len + 1);
	return NGX_CONF_OK;
}

static void *ngx_http_resil_create_loc_conf(ngx_conf_t *cf)
{
	ngx_http_resil_loc_conf_t *lcf = ngx_pcalloc(cf->pool, sizeof(*lcf));

	if (lcf == NULL)
		return NULL;
	lcf->rules = NGX_CONF_UNSET_PTR;
	lcf->status_limited = NGX_CONF_UNSET_UINT;
	lcf->status_rejected = NGX_CONF_UNSET_UINT;
	lcf->dry_run = NGX_CONF_UNSET;
	lcf->log_level = NGX_CONF_UNSET_UINT;
	return lcf;
}

/* A level's `resil` list replaces its parent's, as limit_req's does. */
static char *ngx_http_resil_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
	ngx_http_resil_loc_conf_t *prev = parent, *conf = child;

	ngx_conf_merge_ptr_value(conf->rules, prev->rules, NULL);
	ngx_conf_merge_uint_value(conf->status_limited, prev->status_limited,
				  NGX_HTTP_TOO_MANY_REQUESTS);
	ngx_conf_merge_uint_value(conf->status_rejected, prev->status_rejected,
				  NGX_HTTP_SERVICE_UNAVAILABLE);
	ngx_conf_merge_value(conf->dry_run, prev->dry_run, 0);
	ngx_conf_merge_uint_value(conf->log_level, prev->log_level, NGX_LOG_ERR);
	return NGX_CONF_OK;
}

/* resil_policy NAME "CONFIG" */
static char *ngx_http_resil_policy(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
	ngx_http_resil_main_conf_t *mcf = conf;
	ngx_str_t *value = cf->args->elts;
	ngx_http_resil_decl_t *d = mcf->decls.elts;
	ngx_uint_t i;

	for (i = 0; i < mcf->decls.nelts; i++) {
		if (d[i].name.len == value[1].len &&
		    ngx_strncmp(d[i].name.data, value[1].data, value[1].len) == 0) {
			ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
					   "resil_policy \"%V\" is declared twice", &value[1]);
			return NGX_CONF_ERROR;
		}
	}
	/* the arguments are NUL-terminated (ngx_conf_read_token); a NUL
	 * inside one would cut what the library reads */
	if (ngx_strlen(value[1].data) != value[1].len ||
	    ngx_strlen(value[2].data) != value[2].len ||
	    resil_config_check((char *)value[1].data, (char *)value[2].data, RESIL_CHECK_NO_WAIT) <
		0) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "resil_policy \"%V\": %s", &value[1],
				   resil_last_error()[0] ? resil_last_error()
							 : "not a configuration");
		return NGX_CONF_ERROR;
	}
	d = ngx_array_push(&mcf->decls);
	if (d == NULL)
		return NGX_CONF_ERROR;
	d->name = value[1];
	d->config = value[2];
	return NGX_CONF_OK;
}

/* The index of NAME in mcf->names, added when it is new; NGX_ERROR. */
static ngx_int_t ngx_http_resil_name_index(ngx_conf_t *cf, ngx_http_resil_main_conf_t *mcf,
					   ngx_str_t *name)
{
	ngx_str_t *n = mcf->names.elts;
	ngx_uint_t i;

	for (i = 0; i < mcf->names.nelts; i++)
		if (n[i].len == name->len && ngx_strncmp(n[i].data, name->data, name->len) == 0)
			return (ngx_int_t)i;
	n = ngx_array_push(&mcf->names);
	if (n == NULL)
		return NGX_ERROR;
	*n = *name;
	return (ngx_int_t)(mcf->names.nelts - 1);
}

/* key=$name: the variable itself (its bytes are the key, nothing is
 * copied); any other text with variables: a complex value, built in the
 * request's pool. */
static char *ngx_http_resil_key(ngx_conf_t *cf, ngx_http_resil_rule_t *rule, ngx_str_t *v)
{
	ngx_http_compile_complex_value_t ccv;
	ngx_str_t name;
	ngx_uint_t i;

	if (v->len > 1 && v->data[0] == '$') {
		name.data = v->data + 1;
		name.len = v->len - 1;
		for (i = 0; i < name.len; i++) {
			u_char c = name.data[i];

			if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			      (c >= '0' && c <= '9') || c == '_'))
				break;
		}
		if (i == name.len) {
			rule->key_index = ngx_http_get_variable_index(cf, &name);
			/* the client's address, read where nginx's own variable
			 * reads it (after realip): the request's address itself */
			rule->key_addr =
			    name.len == sizeof("binary_remote_addr") - 1 &&
			    ngx_strncmp(name.data, "binary_remote_addr", name.len) == 0;
			return rule->key_index == NGX_ERROR ? NGX_CONF_ERROR : NGX_CONF_OK;
		}
	}
	if (ngx_strlchr(v->data, v->data + v->len, '$') == NULL) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "resil: key=\"%V\" has no variable: every request would share "
				   "one key (leave key= out for an unkeyed policy)",
				   v);
		return NGX_CONF_ERROR;
	}
	rule->key_value = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
	if (rule->key_value == NULL)
		return NGX_CONF_ERROR;
	ngx_memzero(&ccv, sizeof(ccv));
	ccv.cf = cf;
	ccv.value = v;
	ccv.complex_value = rule->key_value;
	if (ngx_http_compile_complex_value(&ccv) != NGX_OK)
		return NGX_CONF_ERROR;
	return NGX_CONF_OK;
}

/* resil NAME [key=$variable] [outcome=upstream|none] */
static char *ngx_http_resil(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
	ngx_http_resil_loc_conf_t *lcf = conf;
	ngx_http_resil_main_conf_t *mcf;
	ngx_str_t *value = cf->args->elts, v;
	ngx_http_resil_rule_t *rule, *rules;
	ngx_uint_t i, key = 0, outcome = 0;
	ngx_int_t idx;
	char *rv;

	if (ngx_strlen(value[1].data) != value[1].len ||
	    resil_config_check((char *)value[1].data, NULL, 0) < 0) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "resil \"%V\": %s", &value[1],
				   resil_last_error());
		return NGX_CONF_ERROR;
	}
	mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_resil_module);
	idx = ngx_http_resil_name_index(cf, mcf, &value[1]);
	if (idx == NGX_ERROR)
		return NGX_CONF_ERROR;
	if (lcf->rules == NGX_CONF_UNSET_PTR) {
		lcf->rules = ngx_array_create(cf->pool, 2, sizeof(ngx_http_resil_rule_t));
		if (lcf->rules == NULL)
			return NGX_CONF_ERROR;
	}
	rules = lcf->rules->elts;
	for (i = 0; i < lcf->rules->nelts; i++) {
		if (rules[i].policy == (ngx_uint_t)idx) {
			ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
					   "resil \"%V\" is given twice in one place", &value[1]);
			return NGX_CONF_ERROR;
		}
	}
	rule = ngx_array_push(lcf->rules);
	if (rule == NULL)
		return NGX_CONF_ERROR;
	ngx_memzero(rule, sizeof(*rule));
	rule->policy = (ngx_uint_t)idx;
	rule->key_index = NGX_ERROR;
	rule->outcome_upstream = 1;

	for (i = 2; i < cf->args->nelts; i++) {
		if (!key && ngx_strncmp(value[i].data, "key=", 4) == 0) {
			v.data = value[i].data + 4;
			v.len = value[i].len - 4;
			rv = ngx_http_resil_key(cf, rule, &v);
			if (rv != NGX_CONF_OK)
				return rv;
			key = 1;
			continue;
		}
		if (!outcome && ngx_strcmp(value[i].data, "outcome=upstream") == 0) {
			outcome = 1;
			continue;
		}
		if (!outcome && ngx_strcmp(value[i].data, "outcome=none") == 0) {
			rule->outcome_upstream = 0;
			outcome = 1;
			continue;
		}
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "resil \"%V\": invalid parameter \"%V\" (key=$variable, "
				   "outcome=upstream or outcome=none, each once)",
				   &value[1], &value[i]);
		return NGX_CONF_ERROR;
	}
	mcf->held |= rule->outcome_upstream;
	return NGX_CONF_OK;
}

/* The phases, only in an nginx that decides something. */
static ngx_int_t ngx_http_resil_init(ngx_conf_t *cf)
{
	ngx_http_resil_main_conf_t *mcf;
	ngx_http_core_main_conf_t *cmcf;
	ngx_http_handler_pt *h;

	static ngx_str_t verdict = ngx_string("resil_verdict");

	mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_resil_module);
	if (mcf->names.nelts == 0)
		return NGX_OK;
	mcf->verdict_index = ngx_http_get_variable_index(cf, &verdict);
	if (mcf->verdict_index == NGX_ERROR)
		return NGX_ERROR;
	cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);
	h = ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers);
	if (h == NULL)
		return NGX_ERROR;
	*h = ngx_http_resil_access_handler;
	if (!mcf->held)
		return NGX_OK; /* every `resil` releases at once */
	h = ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers);
	if (h == NULL)
		return NGX_ERROR;
	*h = ngx_http_resil_log_handler;
	return NGX_OK;
}

/* ------------------------------------------------------------ the worker */

/* Which policies' acquire may sleep now (a wait that resild's files or an
 * operator gave them): those are not asked (ngx_http_resil_request.c). */
static void ngx_http_resil_waits(ngx_http_resil_worker_t *w)
{
	ngx_uint_t i;

	for (i = 0; i < w->nhandles; i++)
		w->handles[i].waits = w->handles[i].p && resil_policy_may_wait(w->handles[i].p) > 0;
}

/*
 * Once a second, the library's look for resild: a handle asked for by
 * name looks (at most once a second, a bounded probe, never a wait) for
 * resild while pending, and for a resild that restarted once its beat
 * has gone stale, besides the look a decision takes now and then (every
 * 256th of those that read no clock); a worker that serves few requests
 * follows resild within a second or two all the same; a name resild did
 * not know at the worker's start is asked for again. And which policies
 * could now wait (ngx_http_resil_waits): read here rather than on every
 * request, so a wait given to a policy while nginx runs is seen within a
 * second. Cancelable: it never holds up nginx's graceful shutdown.
 */
static void ngx_http_resil_tick(ngx_event_t *ev)
{
	ngx_http_resil_worker_t *w = &ngx_http_resil_worker;
	resil_policy_t *p;
	ngx_uint_t i;
	ngx_int_t now;

	if (w->r == NULL || ngx_exiting || ngx_quit || ngx_terminate)
		return;
	(void)resil_policy(w->r, (const char *)w->names[0].data, &p);
	/* a name resild did not know when the worker started: again */
	for (i = 0; i < w->nhandles; i++)
		if (w->handles[i].p == NULL)
			(void)resil_policy(w->r, (const char *)w->names[i].data, &w->handles[i].p);
	ngx_http_resil_waits(w);
	now = resil_attached(w->r) == 1;
	if (now != w->attached) {
		ngx_log_error(NGX_LOG_NOTICE, ev->log, 0,
			      now ? "resil: resild reached: decisions in its shared memory"
				  : "resil: resild is away: each policy decides by its "
				    "policy.fallback until it is back");
		w->attached = now;
	}
	ngx_add_timer(ev, 1000);
}

static ngx_int_t ngx_http_resil_init_process(ngx_cycle_t *cycle)
{
	ngx_http_resil_worker_t *w = &ngx_http_resil_worker;
	ngx_http_resil_main_conf_t *mcf;
	struct resil_open_opts opts;
	ngx_http_resil_decl_t *d;
	ngx_str_t *names;
	ngx_uint_t i;
	int rc;

	/* workers (and nginx without a master); never the master, the
	 * cache manager or loader */
	if (ngx_process != NGX_PROCESS_WORKER && ngx_process != NGX_PROCESS_SINGLE)
		return NGX_OK;
	mcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_resil_module);
	if (mcf == NULL || (mcf->names.nelts == 0 && mcf->decls.nelts == 0))
		return NGX_OK;

	ngx_memzero(&w->req, sizeof(w->req));
	ngx_memzero(&opts, sizeof(opts));
	opts.size = sizeof(opts);
	opts.socket_path = mcf->socket.len ? (const char *)mcf->socket.data : NULL;
	opts.flags = RESIL_OPEN_PENDING;
	rc = resil_open_ex(&w->r, &opts);
	if (rc < 0) {
		/* what waiting cannot mend (the socket's group, a bad path):
		 * this worker serves without deciding, and says so */
		ngx_log_error(NGX_LOG_ALERT, cycle->log, 0,
			      "resil: no handle on %s: %s (%s): this worker decides nothing",
			      opts.socket_path ? opts.socket_path : "resild's default socket",
			      strerror(-rc), resil_last_error());
		w->r = NULL;
		return NGX_OK;
	}
	d = mcf->decls.elts;
	for (i = 0; i < mcf->decls.nelts; i++) {
		rc = resil_define(w->r, (const char *)d[i].name.data,
				  (const char *)d[i].config.data);
		if (rc < 0)
			ngx_log_error(NGX_LOG_ERR, cycle->log, 0,
				      "resil: policy \"%V\" not declared: %s (%s)", &d[i].name,
				      strerror(-rc), resil_last_error());
	}
	w->handles = ngx_pcalloc(cycle->pool, mcf->names.nelts * sizeof(ngx_http_resil_handle_t));
	if (w->handles == NULL)
		return NGX_ERROR;
	w->nhandles = mcf->names.nelts;
	names = mcf->names.elts;
	for (i = 0; i < mcf->names.nelts; i++) {
		rc = resil_policy(w->r, (const char *)names[i].data, &w->handles[i].p);
		if (rc < 0) {
			w->handles[i].p = NULL;
			ngx_log_error(
			    NGX_LOG_ERR, cycle->log, 0,
			    "resil: no policy \"%V\" yet: %s (%s): asked for again each second",
			    &names[i], strerror(-rc), resil_last_error());
		}
	}
	ngx_http_resil_waits(w);
	w->attached = resil_attached(w->r) == 1;
	ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
		      w->attached
			  ? "resil: %ui policies, decided in resild's shared memory"
			  : "resil: %ui policies; resild is not reachable yet: each decides "
			    "by its policy.fallback until it is",
		      w->nhandles);
	if (w->nhandles) {
		w->names = names;
		w->tick.handler = ngx_http_resil_tick;
		w->tick.log = cycle->log;
		w->tick_conn.fd = (ngx_socket_t)-1;
		w->tick.data = &w->tick_conn;
		w->tick.cancelable = 1;
		ngx_add_timer(&w->tick, 1000);
	}
	return NGX_OK;
}

static void ngx_http_resil_exit_process(ngx_cycle_t *cycle)
{
	ngx_http_resil_worker_t *w = &ngx_http_resil_worker;

	/* a request still open holds permits: resild reclaims a process's
	 * permits when it exits; nothing here releases them after this */
	if (w->tick.timer_set)
		ngx_del_timer(&w->tick);
	w->handles = NULL;
	w->nhandles = 0;
	resil_close(w->r);
	w->r = NULL;
}
