// inj.c: a CUPTI injection library that records the start and end of every
// kernel the process runs, graph nodes included, for scripts/ktrace/kernels.py.
//
// The CUDA driver loads it at cuInit when CUDA_INJECTION64_PATH names it;
// records go to the file $VLA_KTRACE (default /tmp/ktrace.txt), one line a
// kernel: "K start end gridX gridY gridZ blockX stream name" (ns, the GPU's
// clock). A thread flushes CUPTI's buffers every 100 ms: Go programs exit
// without running atexit hooks, so the last 100 ms of a run may be missing,
// and CUPTI drops records (zero timestamps) when its buffers fall behind.
// Build it on the GPU machine with build.sh; it is a developer's tool, not
// part of vlanode.
#include <cupti.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static FILE *out;

static void CUPTIAPI request(uint8_t **buf, size_t *size, size_t *max) {
	*size = 4 << 20;
	*buf = aligned_alloc(8, *size);
	*max = 0;
}

static void CUPTIAPI complete(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
	CUpti_Activity *r = NULL;
	while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
		if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
		const KT *k = (const KT *)r; // KT: the header's kernel record, chosen by build.sh
		fprintf(out, "K %llu %llu %d %d %d %d %u %s\n", (unsigned long long)k->start, (unsigned long long)k->end,
		        k->gridX, k->gridY, k->gridZ, k->blockX, k->streamId, k->name);
	}
	fflush(out);
	free(buf);
}

static void *flusher(void *arg) {
	for (;;) {
		usleep(100000);
		cuptiActivityFlushAll(1);
	}
	return arg;
}

int InitializeInjection(void) {
	const char *path = getenv("VLA_KTRACE");
	if (!path) path = "/tmp/ktrace.txt";
	if (!(out = fopen(path, "w"))) {
		perror("ktrace: opening the trace file");
		return 0;
	}
	cuptiActivityRegisterCallbacks(request, complete);
	CUptiResult e = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	if (e != CUPTI_SUCCESS) {
		fprintf(stderr, "ktrace: cuptiActivityEnable: CUPTI error %d\n", (int)e);
		return 0;
	}
	pthread_t th;
	pthread_create(&th, NULL, flusher, NULL);
	fprintf(stderr, "ktrace: kernel records to %s\n", path);
	return 1;
}
