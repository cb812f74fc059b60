// The pool: pinned worker threads that wait for a job on a generation
// counter (spin, then futex), run it, and count themselves done; a barrier of
// the same kind separates a job's phases. CPUID and the AMX permission live
// here too.
#define _GNU_SOURCE
#include "internal.h"

#include <cpuid.h>
#include <errno.h>
#include <immintrin.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define KERN_CACHELINE 64

struct kern_pool {
	int n;
	pthread_t *threads;
	int *cpus;
	int64_t worker_spin_ns, caller_spin_ns;

	// The running job; written by the caller before gen moves.
	kern_fn fn;
	kern_job *job;
	int stop;

	_Alignas(KERN_CACHELINE) _Atomic uint32_t gen; // futex word: a new job (or stop)
	_Atomic uint32_t gen_sleepers;
	_Alignas(KERN_CACHELINE) _Atomic uint32_t done; // futex word: workers finished
	_Atomic uint32_t caller_sleeping;
	_Alignas(KERN_CACHELINE) _Atomic uint32_t bar_count;
	_Atomic uint32_t bar_gen; // futex word: barrier generation
	_Atomic uint32_t bar_sleepers;
	_Alignas(KERN_CACHELINE) _Atomic int started; // workers that have set their affinity
	_Atomic int start_err;                        // first pinning error (errno)
	_Atomic int start_cpu;                        // its CPU

	// Scratch buffers the caller grows before a job (kern_scratch).
	void *scratch[KERN_SCRATCH_SLOTS];
	size_t scratch_cap[KERN_SCRATCH_SLOTS];
};

static long futex(_Atomic uint32_t *addr, int op, uint32_t val)
{
	return syscall(SYS_futex, (uint32_t *)addr, op, val, NULL, NULL, 0);
}

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// wait_change returns once *addr differs from old: it spins for spin_ns, then
// sleeps on the futex, counting itself in *sleepers so wakers know to call in.
static void wait_change(_Atomic uint32_t *addr, uint32_t old, _Atomic uint32_t *sleepers, int64_t spin_ns)
{
	if (atomic_load(addr) != old)
		return;
	int64_t start = now_ns();
	for (;;) {
		for (int i = 0; i < 64; i++) {
			if (atomic_load_explicit(addr, memory_order_acquire) != old)
				return;
			_mm_pause();
		}
		if (now_ns() - start >= spin_ns)
			break;
	}
	atomic_fetch_add(sleepers, 1);
	while (atomic_load(addr) == old)
		futex(addr, FUTEX_WAIT_PRIVATE, old);
	atomic_fetch_sub(sleepers, 1);
}

// publish changes *addr (seq_cst) and wakes its sleepers, if any.
static void publish(_Atomic uint32_t *addr, _Atomic uint32_t *sleepers)
{
	atomic_fetch_add(addr, 1);
	if (atomic_load(sleepers))
		futex(addr, FUTEX_WAKE_PRIVATE, INT_MAX);
}

typedef struct {
	kern_pool *p;
	int tid;
} worker_arg;

static void *worker(void *arg)
{
	worker_arg a = *(worker_arg *)arg;
	free(arg);
	kern_pool *p = a.p;

	// Signals belong to the Go runtime's threads, never to these.
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);

	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(p->cpus[a.tid], &set);
	int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
	if (rc != 0) {
		int zero = 0;
		if (atomic_compare_exchange_strong(&p->start_err, &zero, rc))
			atomic_store(&p->start_cpu, p->cpus[a.tid]);
	}
	uint32_t seen = atomic_load(&p->gen);
	atomic_fetch_add(&p->started, 1);
	futex((_Atomic uint32_t *)&p->started, FUTEX_WAKE_PRIVATE, INT_MAX);

	for (;;) {
		wait_change(&p->gen, seen, &p->gen_sleepers, p->worker_spin_ns);
		seen = atomic_load(&p->gen);
		if (p->stop)
			break;
		p->fn(p, a.tid, p->job);
		if (atomic_fetch_add(&p->done, 1) + 1 == (uint32_t)p->n && atomic_load(&p->caller_sleeping))
			futex(&p->done, FUTEX_WAKE_PRIVATE, INT_MAX);
	}
	return NULL;
}

int kern_threads(const kern_pool *p) { return p->n; }

void kern_run(kern_pool *p, kern_fn fn, kern_job *j)
{
	p->fn = fn;
	p->job = j;
	atomic_store(&p->done, 0);
	publish(&p->gen, &p->gen_sleepers);

	int64_t start = now_ns();
	while (atomic_load_explicit(&p->done, memory_order_acquire) != (uint32_t)p->n) {
		if (now_ns() - start >= p->caller_spin_ns) {
			atomic_store(&p->caller_sleeping, 1);
			uint32_t d;
			while ((d = atomic_load(&p->done)) != (uint32_t)p->n)
				futex(&p->done, FUTEX_WAIT_PRIVATE, d);
			atomic_store(&p->caller_sleeping, 0);
			break;
		}
		for (int i = 0; i < 16; i++)
			_mm_pause();
	}
	p->job = NULL;
}

void kern_barrier(kern_pool *p)
{
	if (p->n == 1)
		return;
	uint32_t g = atomic_load(&p->bar_gen);
	if (atomic_fetch_add(&p->bar_count, 1) + 1 == (uint32_t)p->n) {
		atomic_store(&p->bar_count, 0);
		publish(&p->bar_gen, &p->bar_sleepers);
		return;
	}
	wait_change(&p->bar_gen, g, &p->bar_sleepers, p->worker_spin_ns);
}

// stop_workers stops and joins the first n workers.
static void stop_workers(kern_pool *p, int n)
{
	p->stop = 1;
	publish(&p->gen, &p->gen_sleepers);
	for (int i = 0; i < n; i++)
		pthread_join(p->threads[i], NULL);
}

int kern_pool_new(const int *cpus, int n, int64_t worker_spin_ns, int64_t caller_spin_ns,
		  kern_pool **out, char *err, int errlen)
{
	*out = NULL;
	kern_pool *p = aligned_alloc(KERN_CACHELINE, (sizeof *p + KERN_CACHELINE - 1) / KERN_CACHELINE * KERN_CACHELINE);
	if (!p) {
		snprintf(err, errlen, "allocating the pool");
		return ENOMEM;
	}
	memset(p, 0, sizeof *p);
	p->n = n;
	p->worker_spin_ns = worker_spin_ns;
	p->caller_spin_ns = caller_spin_ns;
	p->threads = calloc(n, sizeof *p->threads);
	p->cpus = calloc(n, sizeof *p->cpus);
	if (!p->threads || !p->cpus) {
		free(p->threads);
		free(p->cpus);
		free(p);
		snprintf(err, errlen, "allocating the pool");
		return ENOMEM;
	}
	memcpy(p->cpus, cpus, n * sizeof *cpus);

	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 1 << 20);
	int made = 0, rc = 0;
	for (; made < n; made++) {
		worker_arg *a = malloc(sizeof *a);
		if (!a) {
			rc = ENOMEM;
			break;
		}
		a->p = p;
		a->tid = made;
		rc = pthread_create(&p->threads[made], &attr, worker, a);
		if (rc != 0) {
			free(a);
			break;
		}
	}
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		snprintf(err, errlen, "starting worker %d of %d: %s", made, n, strerror(rc));
		stop_workers(p, made);
		free(p->threads);
		free(p->cpus);
		free(p);
		return rc;
	}
	int s;
	while ((s = atomic_load(&p->started)) != n)
		futex((_Atomic uint32_t *)&p->started, FUTEX_WAIT_PRIVATE, (uint32_t)s);
	if ((rc = atomic_load(&p->start_err)) != 0) {
		snprintf(err, errlen, "pinning a worker to CPU %d: %s", atomic_load(&p->start_cpu), strerror(rc));
		kern_pool_free(p);
		return rc;
	}
	*out = p;
	return 0;
}

void *kern_scratch(kern_pool *p, int slot, size_t bytes)
{
	if (bytes <= p->scratch_cap[slot])
		return p->scratch[slot];
	free(p->scratch[slot]);
	p->scratch_cap[slot] = 0;
	size_t cap = (bytes + KERN_CACHELINE - 1) / KERN_CACHELINE * KERN_CACHELINE;
	p->scratch[slot] = aligned_alloc(KERN_CACHELINE, cap);
	if (p->scratch[slot])
		p->scratch_cap[slot] = cap;
	return p->scratch[slot];
}

void kern_pool_free(kern_pool *p)
{
	if (!p)
		return;
	stop_workers(p, p->n);
	for (int i = 0; i < KERN_SCRATCH_SLOTS; i++)
		free(p->scratch[i]);
	free(p->threads);
	free(p->cpus);
	free(p);
}

// xcr0 reads XCR0 (the state components the OS saves), on a CPU with OSXSAVE.
static uint64_t xcr0(void)
{
	uint32_t lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return ((uint64_t)hi << 32) | lo;
}

int kern_features(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return 0;
	int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
	if (!osxsave || !avx)
		return 0;
	uint64_t x = xcr0();
	if ((x & 0x6) != 0x6) // SSE and AVX state
		return 0;
	if (__get_cpuid_max(0, NULL) < 7)
		return 0;
	unsigned b7, c7, d7, a71 = 0, b71, c71, d71;
	__cpuid_count(7, 0, a, b7, c7, d7);
	unsigned max7 = a;
	if (max7 >= 1)
		__cpuid_count(7, 1, a71, b71, c71, d71);
	int f = 0;
	if (((b7 >> 5) & 1) && fma)
		f |= KERN_F_AVX2;
	int zmm = (x & 0xe0) == 0xe0; // opmask, ZMM_Hi256, Hi16_ZMM
	int avx512 = ((b7 >> 16) & 1) && ((b7 >> 17) & 1) && ((b7 >> 30) & 1) && ((b7 >> 31) & 1);
	if (zmm && avx512) {
		f |= KERN_F_AVX512;
		if ((a71 >> 5) & 1)
			f |= KERN_F_AVX512BF16;
	}
	int tiles = (x & 0x60000) == 0x60000; // XTILECFG, XTILEDATA
	if (tiles && ((d7 >> 22) & 1) && ((d7 >> 24) & 1))
		f |= KERN_F_AMXBF16;
	return f;
}

#define KERN_ARCH_REQ_XCOMP_PERM 0x1023
#define KERN_XFEATURE_XTILEDATA 18

int kern_amx_request(void)
{
	if (syscall(SYS_arch_prctl, KERN_ARCH_REQ_XCOMP_PERM, KERN_XFEATURE_XTILEDATA) != 0)
		return errno;
	return 0;
}
