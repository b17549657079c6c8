/* SPDX-License-Identifier: MIT */
/*
 * resil_bench.c - what one decision costs, next to what it would cost
 * otherwise: per-op cost of every hot path, the floors it is built from,
 * the same policy kept per process, a round trip to the daemon per
 * decision, Redis on loopback, multi-process throughput, and two fleet
 * scenarios (a shared rate limit against per-process ones).
 *
 * Method. A case is a loop of n calls. It is calibrated so one run lasts
 * about --target-ms, run --runs times (7; 1 with --smoke), and reported as
 * the median ns/op with the min and max of the runs. With --callgrind it
 * runs a fixed count instead (--cg-iters) between two client requests that
 * switch collection on and off, and dumps one profile per case named
 * "group|name|iters"; bench/run.sh divides the instructions by iters.
 * Valgrind hides the vDSO, so instruction counts of cases that call
 * clock_gettime do not include it (it becomes a syscall valgrind runs
 * itself); the ns/op figures do. The decision clock (shm/clock.c) reads
 * the TSC, which valgrind counts (and re-anchors through clock_gettime).
 *
 * Output: one TSV row per figure on --out (stdout by default):
 *   group  name  metric  median  min  max  unit  note
 * groups: floor, resil (the fleet's segments: resild's when --socket is
 * given, else embedded), resil-process (embedded, unshared: the same
 * policy kept per process), socket (a Get round trip to resild per
 * decision), redis, mp (aggregate throughput of 1, 2, 4 processes), fleet.
 * Round trips are timed twice, the second time with a spinning process
 * keeping the other vCPU awake (metrics *_warm; see spinner_start).
 * Progress goes to stderr.
 *
 * Shared memory here: the floors use one MAP_SHARED memfd page (written by
 * this process only, except in the multi-process floor where each child
 * adds to one word, or to its own 128-byte line), and the keyed table's
 * memory floor a MAP_SHARED memfd the size of a keyed table (written, then
 * read, by this process only; unmapped after the keyed case's runs). The
 * multi-process boards are MAP_SHARED anonymous pages: the parent publishes
 * t0 (release) after every child said ready (fetch_add), children read it
 * (acquire); each child writes only its own 128-byte row, read by the
 * parent after waitpid(). A child killed mid-run leaves its row unwritten:
 * the parent reports the run as failed. Nothing here survives the process:
 * no crash repair needed.
 */
#include "bench.h"

struct bench_opts opt = {
    .runs = 7,
    .target_ms = 40,
    .cg_iters = 20000,
    .mp_secs = 0.3,
    .fleet_secs = 2,
};

volatile uint64_t sink;
uint64_t admits; /* verdicts RESIL_ADMIT counted by the loops */

struct bench_defined defined[256];
int ndefined;

int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

void sleep_ns(int64_t ns)
{
	struct timespec ts = {.tv_sec = ns / NS_PER_S, .tv_nsec = ns % NS_PER_S};

	nanosleep(&ts, NULL);
}

int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

void emit(const char *group, const char *name, const char *metric, double med, double mn, double mx,
	  const char *unit, const char *note)
{
	fprintf(opt.out, "%s\t%s\t%s\t%.6g\t%.6g\t%.6g\t%s\t%s\n", group, name, metric, med, mn, mx,
		unit, note ? note : "");
	fflush(opt.out);
}

static bool matches(const char *full)
{
	const char *o = opt.only;

	if (!o)
		return true;
	/* --only A,B: any of the comma-separated parts */
	for (;;) {
		size_t len = strcspn(o, ",");
		char part[256];

		if (len > 0 && len < sizeof(part)) {
			memcpy(part, o, len);
			part[len] = '\0';
			if (strstr(full, part))
				return true;
		}
		if (!o[len])
			return false;
		o += len + 1;
	}
}

/* --list: each selected case named once, in the order the run meets it */
static bool listed(const char *full)
{
	static char seen[512][96];
	static size_t n;

	for (size_t i = 0; i < n; i++)
		if (strcmp(seen[i], full) == 0)
			return true;
	if (n < sizeof(seen) / sizeof(seen[0]))
		snprintf(seen[n++], sizeof(seen[0]), "%.95s", full);
	return false;
}

bool selected(const char *group, const char *name)
{
	char full[256];

	snprintf(full, sizeof(full), "%s/%s", group, name);
	if (!matches(full))
		return false;
	if (opt.list) {
		if (!listed(full))
			printf("%s\n", full);
		return false;
	}
	return true;
}

/* ---------------------------------------------------------------------- */
/* The harness */

static double run_once(loop_fn fn, void *ctx, uint64_t n)
{
	int64_t t = mono_ns();

	fn(ctx, n);
	return (double)(mono_ns() - t);
}

/* the floors, two groups of simple cases and their keyed cases on 1k keys */
static struct pending batch[128];
static int nbatch;
static bool batching;

static void report_case(const char *group, const char *name, double *v, uint64_t n,
			uint64_t admitted)
{
	char note[128];

	qsort(v, opt.runs, sizeof(v[0]), cmp_double);
	if (strcmp(group, "floor") == 0)
		snprintf(note, sizeof(note), "n=%llu", (unsigned long long)n);
	else
		snprintf(note, sizeof(note), "admitted=%.4f n=%llu",
			 (double)admitted / (double)(n * (uint64_t)opt.runs),
			 (unsigned long long)n);
	emit(group, name, "ns_op", v[opt.runs / 2], v[0], v[opt.runs - 1], "ns", note);
	fprintf(stderr, "  %-14s %-34s %9.2f ns/op [%.2f-%.2f] %s\n", group, name, v[opt.runs / 2],
		v[0], v[opt.runs - 1], note);
}

void batch_begin(void)
{
	batching = !opt.callgrind;
	nbatch = 0;
}

void batch_flush(void)
{
	for (int i = 0; i < opt.runs; i++) {
		for (int k = 0; k < nbatch; k++) {
			struct pending *b = &batch[k];

			admits = 0;
			b->v[i] = run_once(b->fn, b->ctx, b->n) / (double)b->n;
			b->admits += admits;
		}
	}
	for (int k = 0; k < nbatch; k++)
		report_case(batch[k].group, batch[k].name, batch[k].v, batch[k].n, batch[k].admits);
	nbatch = 0;
	batching = false;
}

void measure(const char *group, const char *name, loop_fn fn, void *ctx)
{
	double v[MAX_RUNS], target = opt.target_ms * 1e6, el;
	uint64_t n = 64;
	int i;

	if (!selected(group, name))
		return;
	if (opt.callgrind) {
		char tag[200];

		fn(ctx, 1000); /* warm: first-touch, table fills, branch history */
		admits = 0;
		CALLGRIND_TOGGLE_COLLECT;
		fn(ctx, opt.cg_iters);
		CALLGRIND_TOGGLE_COLLECT;
		snprintf(tag, sizeof(tag), "%s|%s|%llu|%.4f", group, name,
			 (unsigned long long)opt.cg_iters, (double)admits / opt.cg_iters);
		CALLGRIND_DUMP_STATS_AT(tag);
		fprintf(stderr, "  callgrind %s/%s\n", group, name);
		return;
	}
	/* calibrate: grow n until one run takes about the target */
	fn(ctx, n);
	for (;;) {
		el = run_once(fn, ctx, n);
		if (el >= target / 4 || n >= (1ULL << 34))
			break;
		n *= el < target / 64 ? 16 : 2;
	}
	n = (uint64_t)((double)n * target / (el > 1 ? el : 1));
	if (n < 16)
		n = 16;
	if (batching && nbatch < (int)ARRAY_LEN(batch)) {
		batch[nbatch++] =
		    (struct pending){.group = group, .name = name, .fn = fn, .ctx = ctx, .n = n};
		return;
	}
	if (batching) /* its runs are not interleaved with the batch's */
		fprintf(stderr, "resil_bench: batch full: %s/%s runs on its own\n", group, name);
	admits = 0;
	for (i = 0; i < opt.runs; i++)
		v[i] = run_once(fn, ctx, n) / (double)n;
	report_case(group, name, v, n, admits);
}

/* Latency distribution of a round-trip case: p50, p99, mean. */
/*
 * On a VM a round trip costs more when the peer's vCPU is idle: waking a
 * halted vCPU goes through the hypervisor. Round trips are timed twice:
 * as they come ("idle"), and with a spinning process at the lowest priority
 * keeping the other vCPU awake ("warm", metrics *_warm), the faster case
 * the targets compare with.
 */
pid_t spinner_start(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		if (nice(19) < 0)
			_exit(1);
		for (;;)
			__asm__ volatile("" ::: "memory");
	}
	usleep(20000); /* let it reach the other vCPU */
	return pid;
}

void spinner_stop(pid_t pid)
{
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
}

void emit_latency(const char *group, const char *name, double *lat, int n, bool warm)
{
	const char *sfx = warm ? "_warm" : "";
	double mean = 0, p50, p99;
	char note[96], m[32];
	int i;

	if (n <= 0)
		return;
	for (i = 0; i < n; i++)
		mean += lat[i];
	mean /= n;
	qsort(lat, n, sizeof(lat[0]), cmp_double);
	p50 = lat[n / 2];
	p99 = lat[(int)((n - 1) * 0.99)];
	snprintf(note, sizeof(note), "n=%d%s", n, warm ? " other vCPU kept busy" : "");
	snprintf(m, sizeof(m), "ns_op%s", sfx);
	emit(group, name, m, mean, lat[0], lat[n - 1], "ns", note);
	snprintf(m, sizeof(m), "p50_us%s", sfx);
	emit(group, name, m, p50 / 1e3, p50 / 1e3, p50 / 1e3, "us", note);
	snprintf(m, sizeof(m), "p99_us%s", sfx);
	emit(group, name, m, p99 / 1e3, p99 / 1e3, p99 / 1e3, "us", note);
	fprintf(stderr, "  %-14s %-34s mean %.1f us, p50 %.1f us, p99 %.1f us%s\n", group, name,
		mean / 1e3, p50 / 1e3, p99 / 1e3, warm ? " (warm)" : "");
}

static void usage(FILE *f)
{
	fprintf(f, "usage: resil_bench [--smoke] [--callgrind] [--only GROUP/NAME-PART[,...]]\n"
		   "                   [--socket PATH] [--redis PATH] [--out FILE] [--runs N]\n"
		   "                   [--target-ms MS] [--cg-iters N] [--list]\n"
		   "       resil_bench --which-clock\n"
		   "--list names every case the other options select (GROUP/NAME, one a\n"
		   "line) and runs none, as --help does after this text; --socket and\n"
		   "--redis add the cases of a daemon and of Redis. --callgrind runs the\n"
		   "resil groups only.\n");
}

/* --which-clock: the decision clock this process chose (shm/clock.c), after
 * 20 ms of readings (calibration needs two anchors 1 ms apart; polled, not
 * slept: the readings are what calibrates). */
static int which_clock(void)
{
	int64_t t0 = mono_ns();
	const char *env = getenv("RESIL_CLOCK");

	while (mono_ns() - t0 < 20 * NS_PER_MS && !resil_clock_fast_tsc())
		sink += (uint64_t)resil_clock_fast();
	if (resil_clock_fast_tsc())
		printf("TSC, extrapolated to CLOCK_MONOTONIC (shm/clock.c)%s\n",
		       env && strcmp(env, "tsc") == 0
			   ? "; forced by RESIL_CLOCK=tsc: the kernel's clocksource is not the TSC"
			   : "");
	else
		printf("clock_gettime(CLOCK_MONOTONIC) (no usable TSC%s)\n",
		       env && strcmp(env, "monotonic") == 0 ? ": RESIL_CLOCK=monotonic"
							    : " on this host");
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"smoke", no_argument, NULL, 'S'},
	    {"callgrind", no_argument, NULL, 'C'},
	    {"only", required_argument, NULL, 'o'},
	    {"socket", required_argument, NULL, 's'},
	    {"redis", required_argument, NULL, 'R'},
	    {"out", required_argument, NULL, 'O'},
	    {"runs", required_argument, NULL, 'n'},
	    {"target-ms", required_argument, NULL, 't'},
	    {"cg-iters", required_argument, NULL, 'i'},
	    {"which-clock", no_argument, NULL, 'W'},
	    {"list", no_argument, NULL, 'L'},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	resil_t *emb = NULL, *dmn = NULL;
	const char *outpath = NULL;
	int c, ret;

	opt.out = stdout;
	while ((c = getopt_long(argc, argv, "SCo:s:R:O:n:t:i:WLh", opts, NULL)) != -1) {
		switch (c) {
		case 'L':
			opt.list = true;
			break;
		case 'W':
			return which_clock();
		case 'S':
			opt.smoke = true;
			break;
		case 'C':
			opt.callgrind = true;
			break;
		case 'o':
			opt.only = optarg;
			break;
		case 's':
			opt.socket = optarg;
			break;
		case 'R':
			opt.redis = optarg;
			break;
		case 'O':
			outpath = optarg;
			break;
		case 'n':
			opt.runs = atoi(optarg);
			break;
		case 't':
			opt.target_ms = atof(optarg);
			break;
		case 'i':
			opt.cg_iters = strtoull(optarg, NULL, 10);
			break;
		case 'h': /* the usage, then every case, as --list names them */
			usage(stdout);
			printf("cases:\n");
			opt.list = true;
			break;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (opt.smoke) {
		opt.runs = 1;
		opt.target_ms = 1;
		opt.cg_iters = 1000;
		opt.mp_secs = 0.02;
		opt.fleet_secs = 0.1;
	}
	if (opt.runs < 1 || opt.runs > MAX_RUNS)
		opt.runs = opt.runs < 1 ? 1 : MAX_RUNS;
	if (opt.callgrind && !RUNNING_ON_VALGRIND)
		fprintf(stderr, "resil_bench: --callgrind outside valgrind: nothing is counted\n");
	if (outpath) {
		opt.out = fopen(outpath, "w");
		if (!opt.out) {
			fprintf(stderr, "resil_bench: %s: %s\n", outpath, strerror(errno));
			return 1;
		}
	}
	if (!opt.list)
		fprintf(opt.out, "#group\tname\tmetric\tmedian\tmin\tmax\tunit\tnote\n");
	if (floors_init() < 0)
		return 1;
	batch_begin();
	run_floors();

	/* the fleet's segments: resild's when it runs, else embedded */
	if (opt.socket && !opt.callgrind) {
		ret = resil_open(&dmn, opt.socket);
		if (ret < 0) {
			fprintf(stderr, "resil_bench: resil_open %s: %s\n", opt.socket,
				strerror(-ret));
			dmn = NULL;
		}
	}
	ret = resil_open_embedded(&emb, NULL);
	if (ret < 0) {
		fprintf(stderr, "resil_bench: resil_open_embedded: %s\n", strerror(-ret));
		emb = NULL;
	}
	{
		static struct simple_group gd, ge;
		const char *eg = dmn ? "resil-process" : "resil";

		if (dmn)
			run_simple(dmn, "resil", true, &gd);
		if (emb)
			run_simple(emb, eg, !dmn || !opt.smoke, &ge);
		fprintf(stderr, "interleaved runs of the cases above\n");
		batch_flush();
		release_simple(&gd);
		release_simple(&ge);
		if (dmn)
			run_keyed(dmn, "resil");
		if (emb && (!dmn || !opt.smoke))
			run_keyed(emb, eg);
	}

	if (!opt.callgrind) {
		resil_t *fleet = dmn ? dmn : emb;
		const char *where = dmn ? "resild segments" : "embedded segments";

		if (dmn) {
			run_socket(dmn);
			run_reclaim(dmn);
		}
		if (opt.redis)
			run_redis();
		if (fleet) {
			run_mp(fleet, where);
			run_fleet_rate(fleet, where);
		}
	}
	if (dmn) {
		drop_defined(dmn);
		resil_close(dmn);
	}
	resil_close(emb);
	if (opt.out != stdout)
		fclose(opt.out);
	return 0;
}
