/* SPDX-License-Identifier: MIT */
/*
 * ngx_http_resil_request.c - a request's decisions: the `resil` rules of
 * its location in the preaccess phase (where limit_req decides), and the
 * outcome of what it held in the log phase.
 *
 * Preaccess: each rule in order asks its policy (resil_acquire_ex with
 * the key variable's own bytes, read in place, or resil_acquire; a
 * $binary_remote_addr key is the connection's address itself, where
 * nginx's variable reads it): no lock or syscall beyond nginx's own, and
 * nothing allocated for a request that holds no permit: its verdict
 * goes into $resil_verdict's slot of r->variables,
 * which nginx allocated with the request (and which an internal redirect
 * keeps: the slot says the request was decided). A refusal releases what
 * the earlier rules took, as ignored (the request never reached what they
 * guard), and answers resil_status_limited (RESIL_REJECT_LIMITED) or
 * resil_status_rejected (the others), with Retry-After where the policy
 * knows it (resil_permit_wait_ns: a limiter, an OPEN breaker). Under
 * resil_dry_run a refusal is logged and counted (by resild, as any
 * rejection) and the request goes on. outcome=none releases at once, as
 * ignored (a pure limiter); outcome=upstream keeps the permit in the
 * request's context (its pool, with a pool cleanup), so a bulkhead slot
 * stays taken for the whole proxied request.
 *
 * A request is decided once, in the main request: a subrequest is
 * decided with its main request, and a request redirected internally to
 * another location with `resil` rules keeps its first decisions.
 *
 * Log phase: each held permit is released with the upstream's result,
 * the last attempt's status: a 5xx, and the 502 and 504 that nginx gives
 * a connection error or a timeout, are failures by default, and the
 * policy's breaker.record rules decide (resil_outcome_http); a client
 * that went away first (499) is nobody's failure. A request that never
 * reached an upstream (a static file, an error before it) releases at its
 * end, in its pool cleanup, as ignored; the cleanup also releases
 * whatever the log phase did not reach.
 */
#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <errno.h>
#include <string.h>

#include "ngx_http_resil.h"

#define NGX_HTTP_RESIL_CLIENT_CLOSED 499 /* nginx's status for a client that went away */

static void ngx_http_resil_cleanup(void *data);

/* The permits' context, also after an internal redirect (which clears the
 * module contexts): through the request's pool cleanup. NULL: none. */
static ngx_http_resil_ctx_t *ngx_http_resil_held(ngx_http_request_t *r)
{
	ngx_http_resil_ctx_t *ctx = ngx_http_get_module_ctx(r, ngx_http_resil_module);
	ngx_pool_cleanup_t *cln;

	if (ctx != NULL)
		return ctx;
	for (cln = r->pool->cleanup; cln; cln = cln->next) {
		if (cln->handler == ngx_http_resil_cleanup) {
			ctx = cln->data;
			ngx_http_set_ctx(r, ctx, ngx_http_resil_module);
			return ctx;
		}
	}
	return NULL;
}

static void ngx_http_resil_release_all(ngx_http_resil_ctx_t *ctx, int outcome)
{
	ngx_uint_t i;

	/* the worker's handle is gone after exit_process: nothing to give
	 * back to (resild reclaims the exited process's permits) */
	if (ctx == NULL || ngx_http_resil_worker.r == NULL) {
		if (ctx)
			ctx->nheld = 0;
		return;
	}
	for (i = 0; i < ctx->nheld; i++)
		resil_release(ctx->held[i].p, &ctx->held[i].permit, outcome);
	ctx->nheld = 0;
}

static void ngx_http_resil_cleanup(void *data)
{
	ngx_http_resil_release_all(data, RESIL_IGNORED);
}

/* The context for n permits, made at the request's first held one. */
static ngx_http_resil_ctx_t *ngx_http_resil_ctx_new(ngx_http_request_t *r, ngx_uint_t n)
{
	ngx_http_resil_ctx_t *ctx;
	ngx_pool_cleanup_t *cln;

	ctx = ngx_palloc(r->pool, sizeof(*ctx) + (n - 1) * sizeof(ngx_http_resil_held_t));
	cln = ngx_pool_cleanup_add(r->pool, 0);
	if (ctx == NULL || cln == NULL)
		return NULL;
	ctx->nheld = 0;
	cln->handler = ngx_http_resil_cleanup;
	cln->data = ctx;
	ngx_http_set_ctx(r, ctx, ngx_http_resil_module);
	return ctx;
}

static ngx_uint_t ngx_http_resil_verdict_of(int v)
{
	switch (v) {
	case RESIL_REJECT_LIMITED:
		return NGX_HTTP_RESIL_LIMITED;
	case RESIL_REJECT_OPEN:
		return NGX_HTTP_RESIL_OPEN;
	case RESIL_REJECT_FULL:
		return NGX_HTTP_RESIL_FULL;
	case RESIL_REJECT_SHED:
		return NGX_HTTP_RESIL_SHED;
	case RESIL_REJECT_BUDGET:
		return NGX_HTTP_RESIL_BUDGET;
	default:
		return NGX_HTTP_RESIL_ERROR;
	}
}

/* $resil_verdict := verdict (dry: its dry-run form), in the request's
 * slot: cacheable, so the log reads it as it is. */
static void ngx_http_resil_set_verdict(ngx_http_variable_value_t *slot, ngx_uint_t verdict,
				       ngx_uint_t dry)
{
	ngx_str_t *s =
	    &ngx_http_resil_verdict_names[verdict + (dry ? NGX_HTTP_RESIL_NVERDICTS : 0)];

	slot->len = s->len;
	slot->data = s->data;
	slot->valid = 1;
	slot->no_cacheable = 0;
	slot->not_found = 0;
}

/* A keyed rule's key, into the worker's request: a view of bytes nginx
 * keeps for the request (nothing copied, except a key=text$with$variables,
 * built in its pool), or -ENOMEM. An unset or empty value is the empty
 * key, which limit.empty_key decides. */
static int ngx_http_resil_key(ngx_http_request_t *r, ngx_http_resil_rule_t *rule,
			      struct resil_req *req)
{
	struct sockaddr *sa = r->connection->sockaddr;
	ngx_http_variable_value_t *vv;
	ngx_str_t key;

	/* $binary_remote_addr's bytes, as nginx's variable gives them (its
	 * other families, AF_UNIX, through the variable) */
	if (rule->key_addr && sa->sa_family == AF_INET) {
		req->key = &((struct sockaddr_in *)sa)->sin_addr;
		req->key_len = sizeof(struct in_addr);
		return 0;
	}
#if (NGX_HAVE_INET6)
	if (rule->key_addr && sa->sa_family == AF_INET6) {
		req->key = ((struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
		req->key_len = sizeof(struct in6_addr);
		return 0;
	}
#endif
	req->key = "";
	req->key_len = 0;
	if (rule->key_index != NGX_ERROR) {
		vv = ngx_http_get_indexed_variable(r, (ngx_uint_t)rule->key_index);
		if (vv != NULL && !vv->not_found && vv->len != 0 && vv->data != NULL) {
			req->key = vv->data;
			req->key_len = vv->len;
		}
		return 0;
	}
	if (ngx_http_complex_value(r, rule->key_value, &key) != NGX_OK)
		return -ENOMEM;
	if (key.len) {
		req->key = key.data;
		req->key_len = key.len;
	}
	return 0;
}

/* One rule's decision: a verdict (>= 0) or -errno. */
static int ngx_http_resil_decide(ngx_http_request_t *r, ngx_http_resil_rule_t *rule,
				 ngx_http_resil_handle_t *h, resil_permit_t *permit)
{
	struct resil_req *req = &ngx_http_resil_worker.req;
	int rc;

	/* a policy whose acquire may sleep (bulkhead.wait, limit.wait: one
	 * resild's files define) is never asked: the event loop does not
	 * wait (the tick keeps h->waits, ngx_http_resil_module.c) */
	if (h->waits)
		return -EWOULDBLOCK;
	if (rule->key_index == NGX_ERROR && rule->key_value == NULL)
		return resil_acquire(h->p, permit);
	rc = ngx_http_resil_key(r, rule, req);
	return rc < 0 ? rc : resil_acquire_ex(h->p, req, permit);
}

/* Retry-After, in whole seconds rounded up, on the refusal. */
static void ngx_http_resil_retry_after(ngx_http_request_t *r, int64_t wait_ns)
{
	ngx_table_elt_t *h;
	time_t s;

	if (wait_ns <= 0)
		return;
	s = (time_t)((wait_ns + 999999999) / 1000000000);
	h = ngx_list_push(&r->headers_out.headers);
	if (h == NULL)
		return;
	h->value.data = ngx_pnalloc(r->pool, NGX_TIME_T_LEN);
	if (h->value.data == NULL) {
		h->hash = 0;
		return;
	}
	h->hash = 1;
	ngx_str_set(&h->key, "Retry-After");
	h->value.len = ngx_sprintf(h->value.data, "%T", s) - h->value.data;
}

static ngx_str_t *ngx_http_resil_name(ngx_http_request_t *r, ngx_uint_t i)
{
	ngx_http_resil_main_conf_t *mcf = ngx_http_get_module_main_conf(r, ngx_http_resil_module);

	return &((ngx_str_t *)mcf->names.elts)[i];
}

/* An error of policy i, at most once a second per worker. */
static void ngx_http_resil_error(ngx_http_request_t *r, ngx_uint_t i, int err)
{
	ngx_http_resil_handle_t *h = &ngx_http_resil_worker.handles[i];

	if ((ngx_msec_int_t)(ngx_current_msec - h->quiet_until) < 0)
		return;
	h->quiet_until = ngx_current_msec + 1000;
	/* braces: ngx_log_error is a macro holding an if */
	if (err == -EWOULDBLOCK) {
		ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
			      "resil: policy \"%V\" waits for a permit (bulkhead.wait or "
			      "limit.wait), which nginx never does: not decided, admitted",
			      ngx_http_resil_name(r, i));
	} else {
		ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
			      "resil: policy \"%V\" did not decide: %s (%s): admitted",
			      ngx_http_resil_name(r, i), strerror(-err), resil_last_error());
	}
}

ngx_int_t ngx_http_resil_access_handler(ngx_http_request_t *r)
{
	ngx_http_resil_worker_t *w = &ngx_http_resil_worker;
	ngx_http_resil_main_conf_t *mcf;
	ngx_http_resil_loc_conf_t *lcf;
	ngx_http_variable_value_t *slot;
	ngx_http_resil_rule_t *rules;
	ngx_http_resil_ctx_t *ctx = NULL;
	ngx_http_resil_handle_t *h;
	ngx_uint_t i, n, verdict, dry = 0;
	resil_permit_t local, *permit;
	int v;

	lcf = ngx_http_get_module_loc_conf(r, ngx_http_resil_module);
	if (lcf->rules == NULL || r != r->main)
		return NGX_DECLINED;
	mcf = ngx_http_get_module_main_conf(r, ngx_http_resil_module);
	slot = &r->variables[mcf->verdict_index];
	if (slot->valid)
		return NGX_DECLINED; /* decided before an internal redirect */
	if (w->handles == NULL) {
		/* no handle in this worker: init_process said why */
		ngx_http_resil_set_verdict(slot, NGX_HTTP_RESIL_ERROR, 0);
		return NGX_DECLINED;
	}
	verdict = NGX_HTTP_RESIL_ADMIT;
	rules = lcf->rules->elts;
	n = lcf->rules->nelts;
	for (i = 0; i < n; i++) {
		h = &w->handles[rules[i].policy];
		if (h->p == NULL) {
			verdict = NGX_HTTP_RESIL_ERROR;
			continue;
		}
		permit = &local;
		if (rules[i].outcome_upstream) {
			if (ctx == NULL && (ctx = ngx_http_resil_ctx_new(r, n - i)) == NULL)
				return NGX_HTTP_INTERNAL_SERVER_ERROR;
			permit = &ctx->held[ctx->nheld].permit;
		}
		v = ngx_http_resil_decide(r, &rules[i], h, permit);
		if (v == RESIL_ADMIT) {
			if (rules[i].outcome_upstream)
				ctx->held[ctx->nheld++].p = h->p;
			else
				resil_release(h->p, permit, RESIL_IGNORED);
			continue;
		}
		if (v < 0) {
			if (verdict == NGX_HTTP_RESIL_ADMIT)
				verdict = NGX_HTTP_RESIL_ERROR;
			ngx_http_resil_error(r, rules[i].policy, v);
			continue;
		}
		if (lcf->dry_run) {
			if (!dry) {
				dry = 1;
				verdict = ngx_http_resil_verdict_of(v);
			}
			ngx_log_error(lcf->log_level, r->connection->log, 0,
				      "resil: policy \"%V\" would refuse the request (%V), dry run",
				      ngx_http_resil_name(r, rules[i].policy),
				      &ngx_http_resil_verdict_names[ngx_http_resil_verdict_of(v)]);
			continue;
		}
		ngx_http_resil_release_all(ctx, RESIL_IGNORED);
		verdict = ngx_http_resil_verdict_of(v);
		ngx_http_resil_set_verdict(slot, verdict, 0);
		ngx_log_error(lcf->log_level, r->connection->log, 0,
			      "resil: policy \"%V\" refused the request (%V)",
			      ngx_http_resil_name(r, rules[i].policy),
			      &ngx_http_resil_verdict_names[verdict]);
		ngx_http_resil_retry_after(r, resil_permit_wait_ns(permit));
		return v == RESIL_REJECT_LIMITED ? (ngx_int_t)lcf->status_limited
						 : (ngx_int_t)lcf->status_rejected;
	}
	ngx_http_resil_set_verdict(slot, verdict, dry);
	return NGX_DECLINED;
}

/* The status the upstream gave this request (its last attempt's), or 0
 * when it reached none. */
static ngx_uint_t ngx_http_resil_upstream_status(ngx_http_request_t *r)
{
	ngx_http_upstream_state_t *st;
	ngx_uint_t status;

	if (r->upstream_states == NULL || r->upstream_states->nelts == 0)
		return 0;
	st = r->upstream_states->elts;
	status = st[r->upstream_states->nelts - 1].status;
	if (status != 0)
		return status;
	/* an attempt without a status: the request ended before the
	 * upstream answered, and its own status says why */
	status = r->headers_out.status ? r->headers_out.status : (ngx_uint_t)r->err_status;
	if (status == NGX_HTTP_RESIL_CLIENT_CLOSED || status == 0)
		return NGX_HTTP_RESIL_CLIENT_CLOSED;
	return status;
}

ngx_int_t ngx_http_resil_log_handler(ngx_http_request_t *r)
{
	ngx_http_resil_main_conf_t *mcf = ngx_http_get_module_main_conf(r, ngx_http_resil_module);
	ngx_http_resil_ctx_t *ctx;
	ngx_uint_t i, status;
	int outcome;

	/* the main request (a subrequest logged with log_subrequest shares
	 * its pool: never its permits), decided, holding permits, with the
	 * handle still open */
	if (r != r->main || !r->variables[mcf->verdict_index].valid ||
	    ngx_http_resil_worker.r == NULL)
		return NGX_OK;
	ctx = ngx_http_resil_held(r);
	if (ctx == NULL || ctx->nheld == 0)
		return NGX_OK;
	status = ngx_http_resil_upstream_status(r);
	if (status == 0)
		return NGX_OK; /* no upstream: the pool cleanup frees them, ignored */
	for (i = 0; i < ctx->nheld; i++) {
		outcome = status == NGX_HTTP_RESIL_CLIENT_CLOSED
			      ? RESIL_IGNORED
			      : resil_outcome_http(ctx->held[i].p, (int)status);
		resil_release(ctx->held[i].p, &ctx->held[i].permit, outcome);
	}
	ctx->nheld = 0;
	return NGX_OK;
}
