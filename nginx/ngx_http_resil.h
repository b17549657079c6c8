/* SPDX-License-Identifier: MIT */
/*
 * ngx_http_resil.h - what the two halves of ngx_http_resil_module share:
 * its configuration (ngx_http_resil_module.c reads the directives), the
 * worker's handle and policy handles (opened in init_process), and the
 * per-request state the access and log phases pass each other
 * (ngx_http_resil_request.c).
 */
#ifndef NGX_HTTP_RESIL_H_INCLUDED_
#define NGX_HTTP_RESIL_H_INCLUDED_

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <resil.h>

/* $resil_verdict: what the request's decisions came to. */
enum {
	NGX_HTTP_RESIL_NONE = 0, /* not decided (no `resil` here) */
	NGX_HTTP_RESIL_ADMIT,
	NGX_HTTP_RESIL_LIMITED,
	NGX_HTTP_RESIL_OPEN,
	NGX_HTTP_RESIL_FULL,
	NGX_HTTP_RESIL_SHED,
	NGX_HTTP_RESIL_BUDGET,
	NGX_HTTP_RESIL_ERROR, /* a policy could not decide: admitted (the error log says why) */
	NGX_HTTP_RESIL_NVERDICTS
};

/* resil_policy NAME "CONFIG": a declaration, sent by every worker. */
typedef struct {
	ngx_str_t name;	  /* NUL-terminated */
	ngx_str_t config; /* NUL-terminated */
} ngx_http_resil_decl_t;

typedef struct {
	ngx_str_t socket;  /* resil_socket (NUL-terminated); empty: the library's default */
	ngx_array_t decls; /* ngx_http_resil_decl_t */
	ngx_array_t names; /* ngx_str_t, NUL-terminated: each policy a `resil` names, once */
	ngx_uint_t held;   /* some `resil` holds its permit (outcome=upstream): the log phase */
	ngx_int_t verdict_index; /* $resil_verdict's slot in r->variables */
} ngx_http_resil_main_conf_t;

/* resil NAME [key=$variable] [outcome=upstream|none] */
typedef struct {
	ngx_uint_t policy;		     /* index in names */
	ngx_int_t key_index;		     /* key=$name: the variable's index; else NGX_ERROR */
	ngx_uint_t key_addr;		     /* key=$binary_remote_addr */
	ngx_http_complex_value_t *key_value; /* key=text$with$variables; else NULL */
	ngx_uint_t outcome_upstream;	     /* release with the upstream's result */
} ngx_http_resil_rule_t;

typedef struct {
	ngx_array_t *rules; /* ngx_http_resil_rule_t, decided in order; NULL: none */
	ngx_uint_t status_limited;
	ngx_uint_t status_rejected;
	ngx_flag_t dry_run;
	ngx_uint_t log_level;
} ngx_http_resil_loc_conf_t;

/* A worker's policy handle, by the index of its name. */
typedef struct {
	resil_policy_t *p;
	ngx_msec_t quiet_until; /* its errors are logged at most once a second */
	ngx_uint_t waits; /* its acquire may sleep (resil_policy_may_wait), as of the last tick */
} ngx_http_resil_handle_t;

/* The worker's own: opened in init_process, closed in exit_process. */
typedef struct {
	resil_t *r;
	ngx_http_resil_handle_t *handles; /* one per name; NULL: no handle (nothing decided) */
	ngx_uint_t nhandles;
	ngx_str_t *names;	    /* the cycle's names, by handle (NUL-terminated) */
	ngx_event_t tick;	    /* once a second: the library looks for resild */
	ngx_connection_t tick_conn; /* what nginx's timer code names an event by (fd -1) */
	ngx_int_t attached;	    /* what the last tick saw (resil_attached) */
	struct resil_req req;	    /* a keyed decision's: its key set, the rest 0 */
} ngx_http_resil_worker_t;

extern ngx_http_resil_worker_t ngx_http_resil_worker;
extern ngx_module_t ngx_http_resil_module;

/* A permit the request holds until its log phase. */
typedef struct {
	resil_policy_t *p;
	resil_permit_t permit;
} ngx_http_resil_held_t;

/* The permits a request holds until its log phase: in the request's
 * pool, made at its first held permit only, found again after an
 * internal redirect (which clears the module contexts) through its pool
 * cleanup (which releases what the log phase did not). */
typedef struct {
	ngx_uint_t nheld;
	ngx_http_resil_held_t held[1]; /* as many as the location's rules */
} ngx_http_resil_ctx_t;

ngx_int_t ngx_http_resil_access_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_resil_log_handler(ngx_http_request_t *r);
/* $resil_verdict's words: admit .. error, then their dry-run forms */
extern ngx_str_t ngx_http_resil_verdict_names[2 * NGX_HTTP_RESIL_NVERDICTS];

#endif
