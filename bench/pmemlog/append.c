/*
 * libpmemlog append throughput: the peer of crates/mnemo-log/benches/append.rs.
 * Run by scripts/bench-log.sh with PMEM_IS_PMEM_FORCE=1, so the pool on /dev/shm is treated
 * as persistent memory (cache flushes + fence, like mnemo on tmpfs), not msync.
 *
 * usage: append <pool path> <appends per run> <runs> <payload bytes>
 * prints: pmemlog,<payload>,<appends>,<ns per append>,<appends per s>,<fences>,<lines>,
 *         <thread CPU ns per append>
 * (medians of the runs; wall clock, and this thread's CPU time, which excludes other jobs on a
 * shared machine). Wrap-around is pmemlog_rewind inside the timed loop, as mnemo's
 * benchmark resets its log. Fences and lines per append are those of libpmemlog 1.12's
 * pmemlog_append for a line-aligned 64-byte payload: data flushed (1 line) + drain, then the
 * write offset persisted (1 line) + drain; they are stated, not counted.
 */
#include <errno.h>
#include <libpmemlog.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* Append n entries of buf; rewind when the log is full. Returns wall ns per append and
 * stores thread CPU ns per append in *cpu. */
static double run(PMEMlogpool *plp, const char *buf, size_t len, long n, double *cpu)
{
	double start = now_ns(CLOCK_MONOTONIC);
	double cpu_start = now_ns(CLOCK_THREAD_CPUTIME_ID);
	for (long done = 0; done < n;) {
		if (pmemlog_append(plp, buf, len) == 0) {
			done++;
		} else if (errno == ENOSPC) {
			pmemlog_rewind(plp);
		} else {
			perror("pmemlog_append");
			exit(1);
		}
	}
	*cpu = (now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu_start) / n;
	return (now_ns(CLOCK_MONOTONIC) - start) / n;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s <pool> <appends> <runs> <bytes>\n", argv[0]);
		return 2;
	}
	const char *path = argv[1];
	long n = atol(argv[2]);
	int runs = atoi(argv[3]);
	size_t len = (size_t)atol(argv[4]);
	if (n <= 0 || runs <= 0 || runs > 100 || len == 0 || len > 4096) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}
	unlink(path);
	/* 32 MiB of log space, the size of mnemo's benchmark log. */
	PMEMlogpool *plp = pmemlog_create(path, (size_t)(32 << 20) + PMEMLOG_MIN_POOL, 0600);
	if (plp == NULL) {
		perror("pmemlog_create");
		return 1;
	}
	char *buf = malloc(len);
	for (size_t i = 0; i < len; i++)
		buf[i] = (char)i;
	/* Warm up: one pass over the whole log. */
	double cpu[100];
	run(plp, buf, len, (long)(pmemlog_nbyte(plp) / len) + 1, &cpu[0]);
	double ns[100];
	for (int r = 0; r < runs; r++)
		ns[r] = run(plp, buf, len, n, &cpu[r]);
	qsort(ns, (size_t)runs, sizeof ns[0], cmp);
	qsort(cpu, (size_t)runs, sizeof cpu[0], cmp);
	double median = ns[runs / 2];
	printf("pmemlog,%zu,%ld,%.1f,%.0f,2.000,2.000,%.1f\n", len, n, median, 1e9 / median,
	       cpu[runs / 2]);
	pmemlog_close(plp);
	free(buf);
	unlink(path);
	return 0;
}
