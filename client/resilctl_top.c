/* SPDX-License-Identifier: MIT */
/*
 * resilctl_top.c - `resilctl top`: a live table of every policy.
 *
 * What: one GetSegments request (observer: read-only reopens of both
 * segments) at start, then every refresh reads the mapped segments
 * directly: the stats stripes (shm/stats.h), the breaker state, the
 * bulkhead's held permits, the histogram's p50/p99, the retry budget's
 * tokens. No socket traffic per refresh, and nothing is written: the
 * mappings are PROT_READ, so top cannot disturb the fleet it watches.
 *
 * Rates are differences between two refreshes over the time between them
 * (CLOCK_MONOTONIC); a policy seen for the first time, or whose state block
 * changed (a change of shape), shows "-" until the next refresh. Failure
 * and slow percentages are over the calls that finished in the interval.
 *
 * Terminal: ANSI escapes (alternate screen, cursor home, erase line), the
 * tty in non-canonical no-echo mode (ISIG kept, so ^C is SIGINT); the
 * saved termios and the normal screen come back on q, SIGINT, SIGTERM and
 * SIGHUP (the handlers only set a flag; the loop restores). When stdout is
 * not a terminal: plain tables (or JSON lines), no escapes, one per
 * interval, until --iterations or a signal.
 *
 * policy.scope = process: the STATE column reads "2/5 open" when the
 * processes' own breakers disagree, INFL/LIM adds up every process's copy.
 *
 * The segments are untrusted: records are bounds-checked by the stats
 * reader before any state is read; names are printed up to RESIL_NAME_MAX.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "resil.pb-c.h"
#include "resilctl_top.h"
#include "stats.h"
#include "adaptive.h"
#include "breaker.h"
#include "budget.h"
#include "bulkhead.h"

enum sort_col { SORT_CALLS, SORT_FAILURE, SORT_REJECTIONS, SORT_NAME };
static const char *const sort_names[] = {"calls", "failure", "rejections", "name"};

struct row {
	char name[RESIL_NAME_MAX];
	char state[16];	 /* "closed"; process scope: "2/5 open" when they differ */
	bool budget;	 /* a named budget, not a callable policy */
	double calls_s;	 /* NAN: unknown (first sight) */
	double fail_pct; /* NAN: no call finished in the interval */
	double slow_pct;
	double rej_s;
	int64_t inflight; /* -1: unknown */
	int64_t limit;	  /* -1: none */
	int64_t p50, p99; /* -1: no histogram or no samples */
	double tokens;	  /* NAN: no budget */
	uint64_t calls;	  /* cumulative, for the first frame */
};

struct prev {
	uint64_t state_off; /* 0: nothing seen in this slot */
	uint64_t v[RESIL_STAT__MAX];
};

struct top {
	struct resil_seg seg;
	struct prev *prev; /* per slot */
	int64_t prev_ns;
	struct row *rows;
	size_t nrows, cap;
	enum sort_col sort;
	int64_t now;
	double dt; /* seconds since the previous refresh, 0: first */
};

static volatile sig_atomic_t top_stop, top_winch;

static void on_stop(int sig)
{
	(void)sig;
	top_stop = 1;
}

static void on_winch(int sig)
{
	(void)sig;
	top_winch = 1;
}

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * RESIL_NS_PER_S + ts.tv_nsec;
}

/* ---- getting the segments: once ---- */

static bool top_json; /* --json: errors as JSON objects too */
static void json_str(FILE *f, const char *s);

/* An error (err: a positive errno): "resilctl top: MSG" on stderr, or with
 * --json {"errno": N, "error": "ENAME", "message": "MSG"}, as resilctl's. */
static void top_err(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void top_err(int err, const char *fmt, ...)
{
	const char *name = strerrorname_np(err);
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!top_json) {
		fprintf(stderr, "resilctl top: %s\n", msg);
		return;
	}
	fprintf(stderr, "{\"errno\":%d,\"error\":", err);
	json_str(stderr, name ? name : "EIO");
	fprintf(stderr, ",\"message\":");
	json_str(stderr, msg);
	fprintf(stderr, "}\n");
}

static int map_segments(const char *socket, struct resil_seg *seg)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__GetSegments gs = RESIL__GET_SEGMENTS__INIT;
	Resil__Response *resp = NULL;
	struct resil *r = NULL;
	int fds[2] = {-1, -1}, nfds = 2, err;
	char why[256] = "";

	err = resil_priv_open_ctl(&r, socket);
	if (err < 0) {
		top_err(-err, "%s", *resil_last_error() ? resil_last_error() : strerror(-err));
		return err;
	}
	gs.observer = true;
	req.body_case = RESIL__REQUEST__BODY_GET_SEGMENTS;
	req.get_segments = &gs;
	pthread_mutex_lock(&r->lock);
	err = resil_priv_request(r, &req, &resp, fds, &nfds);
	pthread_mutex_unlock(&r->lock);
	if (err < 0) {
		top_err(-err, "cannot get the segments from resild on %s: %s", r->socket_path,
			*resil_last_error() ? resil_last_error() : strerror(-err));
		resil_close(r);
		return err;
	}
	resil__response__free_unpacked(resp, NULL);
	if (nfds != 2) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		top_err(EPROTO, "resild sent %d descriptors, not 2", nfds);
		resil_close(r);
		return -EPROTO;
	}
	err = resil_seg_map(seg, fds[0], fds[1], false, false, why, sizeof(why));
	if (err < 0) {
		close(fds[0]);
		close(fds[1]);
		top_err(-err, "cannot map the segments: %s", *why ? why : strerror(-err));
	}
	resil_close(r); /* the mappings stay; no traffic from here on */
	return err;
}

/* ---- one refresh ---- */

/* the table's column: the short words; "-" for no breaker */
static const char *state_word(int st)
{
	return st < 0 ? "-" : resil_breaker_state_short(st);
}

static uint64_t rejections(const uint64_t *v)
{
	return v[RESIL_STAT_REJ_OPEN] + v[RESIL_STAT_REJ_FULL] + v[RESIL_STAT_REJ_LIMITED] +
	       v[RESIL_STAT_REJ_SHED] + v[RESIL_STAT_REJ_BUDGET];
}

/* A counter below its previous reading: the policy was reset (or a
 * corrupt segment); no rate for this interval. */
static bool went_down(const uint64_t *v, const uint64_t *prev)
{
	for (int i = 0; i < RESIL_STAT__MAX; i++)
		if (v[i] < prev[i])
			return true;
	return false;
}

/* The component comp in the block [base, base + bsize), if inside it. */
static void *block_comp(const struct resil_rec *rec, const struct resil_seg *s, uint64_t base,
			uint64_t bsize, enum resil_comp comp, uint64_t size)
{
	uint64_t off = rec->comp_off[comp];

	if (!resil_has(rec, comp) || base > s->st_size || bsize > s->st_size - base ||
	    off > bsize || size > bsize - off)
		return NULL;
	return resil_seg_state(s, base + off);
}

struct decided {
	int state;	  /* RESIL_STATE_*, -1: no breaker */
	int64_t inflight; /* -1: no bulkhead or adaptive limit */
	int64_t limit;
};

/* Breaker state, permits held and limit of one block of decisions. */
static void decide_block(const struct resil_seg *s, const struct resil_rec *rec, uint64_t base,
			 uint64_t bsize, struct decided *d)
{
	const struct resil_conf *c = &rec->conf;
	void *cs;

	d->state = -1;
	d->inflight = d->limit = -1;
	cs =
	    block_comp(rec, s, base, bsize, RESIL_C_BREAKER, resil_breaker_state_size(&c->breaker));
	if (cs && c->breaker.on)
		d->state = resil_breaker_state(cs);
	cs = block_comp(rec, s, base, bsize, RESIL_C_BULKHEAD,
			resil_bulkhead_state_size(&c->bulkhead));
	if (cs && c->bulkhead.on) {
		d->inflight = resil_bulkhead_held(&c->bulkhead, cs);
		d->limit = c->bulkhead.max;
		return;
	}
	cs = block_comp(rec, s, base, bsize, RESIL_C_ADAPTIVE,
			resil_adaptive_state_size(&c->adaptive));
	if (cs && c->adaptive.on) {
		d->inflight = resil_adaptive_held(&c->adaptive, cs);
		d->limit = resil_adaptive_limit(cs);
	}
}

/*
 * The decision columns of a row. Fleet scope: the policy's block. Process
 * scope: every live process's copy; permits and limits add up (the fleet's
 * capacity), the state is the common one or "N/M open" (N of M processes
 * see their breaker open or forced open).
 */
static void decisions(const struct resil_seg *s, const struct resil_rec *rec, struct row *w)
{
	struct decided d;
	uint32_t cap = s->geo.client_cap, live = 0, open = 0;
	int common = -2;

	snprintf(w->state, sizeof(w->state), "%s", w->budget ? "budget" : "-");
	w->inflight = w->limit = -1;
	if (w->budget)
		return;
	if (!rec->proc_stride) {
		decide_block(s, rec, rec->state_off, rec->state_size, &d);
		snprintf(w->state, sizeof(w->state), "%s", state_word(d.state));
		w->inflight = d.inflight;
		w->limit = d.limit;
		return;
	}
	if (rec->proc_off > s->st_size ||
	    rec->proc_stride > (s->st_size - rec->proc_off) / (cap ? cap : 1))
		return;
	for (uint32_t i = 0; i < cap; i++) {
		const struct resil_client_row *row = resil_seg_client(s, i);

		if (!ld_acquire(&row->owner) || (ld_relaxed(&row->flags) & RESIL_ROW_DEAD))
			continue;
		decide_block(s, rec, rec->proc_off + (uint64_t)i * rec->proc_stride,
			     rec->proc_stride, &d);
		live++;
		open += d.state == RESIL_STATE_OPEN || d.state == RESIL_STATE_FORCED_OPEN;
		common = common == -2 || common == d.state ? d.state : -3;
		if (d.limit >= 0) {
			w->inflight = (w->inflight < 0 ? 0 : w->inflight) + d.inflight;
			w->limit = (w->limit < 0 ? 0 : w->limit) + d.limit;
		}
	}
	if (common == -3)
		snprintf(w->state, sizeof(w->state), "%u/%u open", open, live);
	else if (common >= -1)
		snprintf(w->state, sizeof(w->state), "%s", state_word(common));
}

static int collect_one(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
		       void *ctx)
{
	struct top *t = ctx;
	const struct resil_conf *c = &rec->conf;
	const struct resil_retry_conf *bc = NULL;
	uint64_t v[RESIL_STAT__MAX];
	struct prev *pv = slot < s->cfg->slot_cap ? &t->prev[slot] : NULL;
	struct row *w;
	void *st = resil_stats_state_of(s, rec);
	void *bst;

	if (!st)
		return 0;
	if (t->nrows == t->cap) {
		size_t ncap = t->cap ? t->cap * 2 : 64;
		struct row *n = realloc(t->rows, ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		t->rows = n;
		t->cap = ncap;
	}
	w = &t->rows[t->nrows++];
	memset(w, 0, sizeof(*w));
	memcpy(w->name, rec->name, RESIL_NAME_MAX - 1);
	w->name[RESIL_NAME_MAX - 1] = '\0';
	for (char *p = w->name; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
			*p = '?';
	w->budget = rec->flags & RESIL_REC_BUDGET;
	decisions(s, rec, w);

	resil_stats_read_all(st, v);
	w->calls = resil_stats_calls(v);
	w->calls_s = w->fail_pct = w->slow_pct = w->rej_s = NAN;
	if (pv && pv->state_off == rec->state_off && t->dt > 0 && !went_down(v, pv->v)) {
		uint64_t d[RESIL_STAT__MAX], done;

		for (int i = 0; i < RESIL_STAT__MAX; i++)
			d[i] = v[i] - pv->v[i];
		done = d[RESIL_STAT_SUCCESS] + d[RESIL_STAT_FAILURE];
		w->calls_s = (double)resil_stats_calls(d) / t->dt;
		w->rej_s = (double)rejections(d) / t->dt;
		if (done) {
			w->fail_pct = 100.0 * (double)d[RESIL_STAT_FAILURE] / (double)done;
			w->slow_pct = 100.0 * (double)d[RESIL_STAT_SLOW] / (double)done;
		}
	}
	if (pv) {
		pv->state_off = rec->state_off;
		memcpy(pv->v, v, sizeof(v));
	}

	w->p50 = w->p99 = -1;
	if (resil_stats_percentile_ns(st, c, 0.50, &w->p50))
		w->p50 = -1;
	if (resil_stats_percentile_ns(st, c, 0.99, &w->p99))
		w->p99 = -1;
	w->tokens = NAN;
	bst = resil_budget_state_for(s, rec, &bc);
	if (bst && bc)
		w->tokens = (double)resil_budget_tokens_milli(bst, bc, t->now) / 1000.0;
	return 0;
}

static int cmp_rows(const void *a, const void *b, void *ctx)
{
	const struct row *x = a, *y = b;
	enum sort_col col = *(enum sort_col *)ctx;
	double dx, dy;

	switch (col) {
	case SORT_FAILURE:
		dx = x->fail_pct;
		dy = y->fail_pct;
		break;
	case SORT_REJECTIONS:
		dx = x->rej_s;
		dy = y->rej_s;
		break;
	case SORT_CALLS:
		dx = isnan(x->calls_s) ? -1 : x->calls_s;
		dy = isnan(y->calls_s) ? -1 : y->calls_s;
		if (dx == dy) {
			dx = (double)x->calls;
			dy = (double)y->calls;
		}
		break;
	default:
		return strcmp(x->name, y->name);
	}
	if (isnan(dx))
		dx = -1;
	if (isnan(dy))
		dy = -1;
	if (dx != dy)
		return dx > dy ? -1 : 1; /* descending */
	return strcmp(x->name, y->name);
}

static int collect(struct top *t)
{
	int r;

	t->now = mono_ns();
	t->dt = t->prev_ns ? (double)(t->now - t->prev_ns) / 1e9 : 0;
	t->nrows = 0;
	r = resil_seg_foreach(&t->seg, collect_one, t);
	t->prev_ns = t->now;
	return r;
}

static void sort_rows(struct top *t)
{
	qsort_r(t->rows, t->nrows, sizeof(*t->rows), cmp_rows, &t->sort);
}

/* ---- rendering ---- */

static void fmt_dur(char *b, size_t n, int64_t ns)
{
	if (ns < 0)
		snprintf(b, n, "-");
	else if (ns < RESIL_NS_PER_US)
		snprintf(b, n, "%" PRId64 "ns", ns);
	else if (ns < 10 * RESIL_NS_PER_US)
		snprintf(b, n, "%.1fus", (double)ns / 1e3);
	else if (ns < RESIL_NS_PER_MS)
		snprintf(b, n, "%.0fus", (double)ns / 1e3);
	else if (ns < 10 * RESIL_NS_PER_MS)
		snprintf(b, n, "%.1fms", (double)ns / 1e6);
	else if (ns < RESIL_NS_PER_S)
		snprintf(b, n, "%.0fms", (double)ns / 1e6);
	else if (ns < 100 * RESIL_NS_PER_S)
		snprintf(b, n, "%.1fs", (double)ns / 1e9);
	else
		snprintf(b, n, "%.0fs", (double)ns / 1e9);
}

static void fmt_num(char *b, size_t n, double v, bool pct)
{
	if (isnan(v))
		snprintf(b, n, "-");
	else if (pct)
		snprintf(b, n, "%.1f", v);
	else if (v < 10 && v != floor(v))
		snprintf(b, n, "%.1f", v);
	else if (v < 100000)
		snprintf(b, n, "%.0f", v);
	else if (v < 100e6)
		snprintf(b, n, "%.0fk", v / 1e3);
	else
		snprintf(b, n, "%.0fM", v / 1e6);
}

/* Column widths: the name column is as wide as the longest name, as far as
 * the screen allows (12 on 80 columns). */
#define W_REST 67 /* every column but the name, with their separators */

/* One line, cut to width columns (a screen narrower than the table). */
static void put_line(FILE *f, int width, const char *eol, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put_line(FILE *f, int width, const char *eol, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n >= (int)sizeof(line))
		n = (int)sizeof(line) - 1;
	fwrite(line, 1, (size_t)(n < width ? n : width > 0 ? width : 0), f);
	fputs(eol, f);
}

static void render_table(struct top *t, FILE *f, int cols, int maxrows, const char *eol)
{
	int nw = 12, room = cols - 1 - W_REST;
	char cs[16], fp[16], sp[16], rs[16], il[48], p50[16], p99[16], tk[16];

	/* the longest name, within what the screen leaves (8 at least) */
	for (size_t i = 0; i < t->nrows; i++)
		if ((int)strlen(t->rows[i].name) > nw)
			nw = (int)strlen(t->rows[i].name);
	if (nw > room)
		nw = room;
	if (nw < 8)
		nw = 8;
	put_line(f, cols - 1, eol, "%-*s %-9s %7s %5s %5s %6s %8s %6s %6s %6s", nw, "NAME", "STATE",
		 "CALLS/s", "FAIL%", "SLOW%", "REJ/s", "INFL/LIM", "P50", "P99", "BUDGET");
	for (size_t i = 0; i < t->nrows && (maxrows < 0 || (int)i < maxrows); i++) {
		const struct row *w = &t->rows[i];
		char name[RESIL_NAME_MAX];

		snprintf(name, sizeof(name), "%s", w->name);
		if ((int)strlen(name) > nw) {
			name[nw - 1] = '~';
			name[nw] = '\0';
		}
		fmt_num(cs, sizeof(cs), w->calls_s, false);
		fmt_num(fp, sizeof(fp), w->fail_pct, true);
		fmt_num(sp, sizeof(sp), w->slow_pct, true);
		fmt_num(rs, sizeof(rs), w->rej_s, false);
		if (w->limit < 0)
			snprintf(il, sizeof(il), "-");
		else if (w->inflight < 0)
			snprintf(il, sizeof(il), "-/%" PRId64, w->limit);
		else
			snprintf(il, sizeof(il), "%" PRId64 "/%" PRId64, w->inflight, w->limit);
		fmt_dur(p50, sizeof(p50), w->p50);
		fmt_dur(p99, sizeof(p99), w->p99);
		fmt_num(tk, sizeof(tk), w->tokens, true);
		put_line(f, cols - 1, eol,
			 "%-*s %-9.9s %7.7s %5.5s %5.5s %6.6s %8.8s %6.6s %6.6s %6.6s", nw, name,
			 w->state, cs, fp, sp, rs, il, p50, p99, tk);
	}
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void json_num(FILE *f, const char *key, double v)
{
	fprintf(f, ",\"%s\":", key);
	if (isnan(v))
		fputs("null", f);
	else
		fprintf(f, "%.6g", v);
}

static void render_json(struct top *t, FILE *f)
{
	fprintf(f, "{\"time_ns\":%" PRId64 ",\"sort\":\"%s\",\"policies\":[", t->now,
		sort_names[t->sort]);
	for (size_t i = 0; i < t->nrows; i++) {
		const struct row *w = &t->rows[i];

		fputs(i ? ",{\"name\":" : "{\"name\":", f);
		json_str(f, w->name);
		fprintf(f, ",\"state\":\"%s\",\"calls\":%" PRIu64, w->state, w->calls);
		json_num(f, "calls_per_s", w->calls_s);
		json_num(f, "failure_pct", w->fail_pct);
		json_num(f, "slow_pct", w->slow_pct);
		json_num(f, "rejections_per_s", w->rej_s);
		json_num(f, "inflight", w->inflight < 0 ? NAN : (double)w->inflight);
		json_num(f, "limit", w->limit < 0 ? NAN : (double)w->limit);
		json_num(f, "p50_ns", w->p50 < 0 ? NAN : (double)w->p50);
		json_num(f, "p99_ns", w->p99 < 0 ? NAN : (double)w->p99);
		json_num(f, "budget_tokens", w->tokens);
		fputc('}', f);
	}
	fputs("]}\n", f);
	fflush(f);
}

static void screen_size(int *rows, int *cols)
{
	struct winsize ws;

	*rows = 24;
	*cols = 80;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
		*rows = ws.ws_row;
		*cols = ws.ws_col;
	}
}

static void render_screen(struct top *t)
{
	int rows, cols;
	char head[256];
	time_t now = time(NULL);
	struct tm tm;

	screen_size(&rows, &cols);
	localtime_r(&now, &tm);
	snprintf(head, sizeof(head),
		 "resil top %02d:%02d:%02d  %zu policies  sort: %s  keys: c f r n sort, q quit",
		 tm.tm_hour, tm.tm_min, tm.tm_sec, t->nrows, sort_names[t->sort]);
	if ((int)strlen(head) > cols - 1)
		head[cols > 1 ? cols - 1 : 0] = '\0';
	fputs("\x1b[H", stdout);
	fprintf(stdout, "\x1b[7m%-*s\x1b[0m\x1b[K\r\n", cols - 1, head);
	render_table(t, stdout, cols, rows - 2, "\x1b[K\r\n");
	fputs("\x1b[J", stdout);
	fflush(stdout);
}

static void render_plain(struct top *t)
{
	time_t now = time(NULL);
	struct tm tm;

	localtime_r(&now, &tm);
	printf("resil top %02d:%02d:%02d  %zu policies  sort: %s\n", tm.tm_hour, tm.tm_min,
	       tm.tm_sec, t->nrows, sort_names[t->sort]);
	/* no screen to fit: whole names, so scripts can match them */
	render_table(t, stdout, RESIL_NAME_MAX + 1 + W_REST, -1, "\n");
	printf("\n");
	fflush(stdout);
}

/* ---- options, terminal, loop ---- */

static int parse_sort(const char *s, enum sort_col *out)
{
	for (int i = 0; i < (int)RESIL_ARRAY_SIZE(sort_names); i++) {
		if (!strcmp(s, sort_names[i]) || (s[0] == sort_names[i][0] && !s[1])) {
			*out = (enum sort_col)i;
			return 0;
		}
	}
	return -EINVAL;
}

/* why NULL: --help asked for it (stdout, exit 0); else a usage error */
static int top_usage(const char *why)
{
	FILE *f = why ? stderr : stdout;

	if (why && top_json) {
		top_err(EINVAL, "%s (resilctl top --help)", why);
		return 2;
	}
	if (why)
		fprintf(stderr, "resilctl top: %s\n", why);
	fprintf(f, "usage: resilctl top [--sort calls|failure|rejections|name] "
		   "[--iterations N] [--interval MS] [--json]\n");
	if (!why)
		fprintf(f, "A live table of every policy, refreshed every --interval ms "
			   "(default 1000);\n"
			   "--iterations N stops after N tables. Keys on a terminal: c, f, "
			   "r, n sort\n"
			   "by calls, failure, rejections, name; q quits.\n");
	return why ? 2 : 0;
}

/* "--opt V" or "--opt=V": the value, advancing *i; NULL if a is not opt. */
static const char *opt_value(int argc, char **argv, int *i, const char *opt, bool *missing)
{
	size_t n = strlen(opt);
	const char *a = argv[*i];

	if (strncmp(a, opt, n))
		return NULL;
	if (a[n] == '=')
		return a + n + 1;
	if (a[n])
		return NULL;
	if (*i + 1 >= argc) {
		*missing = true;
		return NULL;
	}
	return argv[++*i];
}

int resilctl_top(int argc, char **argv, const char *socket, bool json)
{
	struct top t = {.sort = SORT_CALLS};
	struct termios saved, raw;
	struct sigaction sa = {0}, old_int, old_term, old_hup, old_winch;
	long iterations = 0, interval_ms = 1000, n = 0;
	bool tty, term_set = false;
	int ret = 0;

	/* --json anywhere makes every error JSON, those before it too */
	top_json = json;
	for (int i = 0; i < argc; i++)
		top_json = top_json || !strcmp(argv[i], "--json");
	for (int i = 0; i < argc; i++) {
		bool missing = false;
		const char *v;
		char *end;

		if ((v = opt_value(argc, argv, &i, "--sort", &missing))) {
			if (parse_sort(v, &t.sort))
				return top_usage("--sort takes calls, failure, rejections or name");
		} else if ((v = opt_value(argc, argv, &i, "--iterations", &missing))) {
			iterations = strtol(v, &end, 10);
			if (*end || iterations < 1)
				return top_usage("--iterations takes a positive number");
		} else if ((v = opt_value(argc, argv, &i, "--interval", &missing))) {
			interval_ms = strtol(v, &end, 10);
			if (*end || interval_ms < 10 || interval_ms > 3600000)
				return top_usage("--interval takes milliseconds, 10 to 3600000");
		} else if ((v = opt_value(argc, argv, &i, "--socket", &missing))) {
			socket = v;
		} else if (!strcmp(argv[i], "--json")) {
			json = true;
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			return top_usage(NULL);
		} else if (missing) {
			return top_usage("option needs a value");
		} else {
			char why[128];

			snprintf(why, sizeof(why), "unknown argument %s", argv[i]);
			return top_usage(why);
		}
		if (missing)
			return top_usage("option needs a value");
	}

	if (map_segments(socket, &t.seg) < 0)
		return 1;
	t.prev = calloc(t.seg.cfg->slot_cap, sizeof(*t.prev));
	if (!t.prev) {
		top_err(ENOMEM, "out of memory");
		resil_seg_unmap(&t.seg);
		return 1;
	}

	sa.sa_handler = on_stop; /* no SA_RESTART: poll returns EINTR */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	sigaction(SIGHUP, &sa, &old_hup);
	sa.sa_handler = on_winch;
	sigaction(SIGWINCH, &sa, &old_winch);

	tty = !json && isatty(STDOUT_FILENO) && isatty(STDIN_FILENO);
	if (tty && tcgetattr(STDIN_FILENO, &saved) == 0) {
		raw = saved;
		raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		raw.c_cc[VMIN] = 0;
		raw.c_cc[VTIME] = 0;
		if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0)
			term_set = true;
		fputs("\x1b[?1049h\x1b[?25l\x1b[2J", stdout); /* alternate screen, no cursor */
	} else {
		tty = false;
	}

	while (!top_stop) {
		int64_t deadline;

		if (collect(&t) < 0) {
			ret = 1;
			break;
		}
		sort_rows(&t);
		if (json)
			render_json(&t, stdout);
		else if (tty)
			render_screen(&t);
		else
			render_plain(&t);
		if (iterations && ++n >= iterations)
			break;
		if (ld_acquire(&t.seg.cfg->flags) & RESIL_SEG_RETIRED) {
			top_err(ESTALE, "the daemon retired these segments (restarted with "
					"another ABI): run top again");
			ret = 1;
			break;
		}
		deadline = mono_ns() + interval_ms * RESIL_NS_PER_MS;
		while (!top_stop) {
			int64_t left = deadline - mono_ns();
			struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
			char keys[32];
			ssize_t k;

			if (left <= 0)
				break;
			if (poll(&pfd, tty ? 1 : 0, (int)((left + 999999) / 1000000)) <= 0) {
				if (top_winch && tty) {
					top_winch = 0;
					render_screen(&t);
				}
				continue;
			}
			k = read(STDIN_FILENO, keys, sizeof(keys));
			if (k == 0) {
				tty = tty && isatty(STDIN_FILENO);
				break;
			}
			for (ssize_t j = 0; j < k; j++) {
				enum sort_col col;
				char key[2] = {keys[j], 0};

				if (keys[j] == 'q' || keys[j] == 'Q') {
					top_stop = 1;
				} else if (parse_sort(key, &col) == 0) {
					t.sort = col;
					sort_rows(&t);
					render_screen(&t);
				}
			}
		}
	}

	if (tty) {
		fputs("\x1b[?25h\x1b[?1049l", stdout);
		fflush(stdout);
	}
	if (term_set)
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	sigaction(SIGHUP, &old_hup, NULL);
	sigaction(SIGWINCH, &old_winch, NULL);
	free(t.rows);
	free(t.prev);
	resil_seg_unmap(&t.seg);
	return ret;
}
