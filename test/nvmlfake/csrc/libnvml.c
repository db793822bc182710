/*
 * A fake libnvidia-ml.so.1: the NVML C ABI of nvml.h (go-nvml v0.13.4-1's
 * copy, whose handle types are one-pointer structs, passed as the pointer
 * is), answered by the simulator over a unix socket ($GPUXRAY_NVMLFAKE_SOCKET,
 * protocol in proto.h, server in server.go). A process linked against
 * go-nvml runs on it unmodified: go-nvml dlopens the library and binds each
 * symbol on its first call.
 *
 * What the C side decides itself, as a driver's library does: which
 * symbols exist (the build's variant), the versioned structs' version
 * checks, the count/INSUFFICIENT_SIZE protocol of the list calls, the
 * process entry layout each symbol version writes, and nvmlErrorString.
 * What the simulator decides: every value.
 *
 * Variants (compiler flags):
 *   -DFAKE_R470      R470: no nvmlDeviceGetMemoryInfo_v2, no _v3 process
 *                    lists, no GPM (a call of them ends the process with
 *                    "symbol lookup error", as on a real R470 node).
 *   -DFAKE_V3_STRIDE=32
 *                    535.43 to 535.86: the _v3 process lists write 32-byte
 *                    entries (nvmlProcessDetail_v1_t's layout) into the
 *                    caller's nvmlProcessInfo_t array (go-nvml #75).
 */
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include "nvml.h"
#include "proto.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* Device and GPM sample handles point into these tables: the simulator
 * names them by number. */
struct nvmlDevice_st { uint32_t id; };
struct nvmlGpmSample_st { uint32_t id; };

#define MAX_HANDLES 4096
static struct nvmlDevice_st devices[MAX_HANDLES];

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int sock = -1;

/* A growing buffer for one request or reply. */
struct buf {
	uint8_t *p;
	size_t len, cap, off;
};

static void put(struct buf *b, const void *v, size_t n) {
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2 + 64;
		b->p = realloc(b->p, b->cap);
		if (!b->p)
			abort();
	}
	memcpy(b->p + b->len, v, n);
	b->len += n;
}
static void put32(struct buf *b, uint32_t v) { put(b, &v, 4); }
static void put64(struct buf *b, uint64_t v) { put(b, &v, 8); }
static void putstr(struct buf *b, const char *s) {
	uint32_t n = (uint32_t)strlen(s);
	put32(b, n);
	put(b, s, n);
}

/* get reads n bytes of the reply into v, zeros past its end. */
static void get(struct buf *b, void *v, size_t n) {
	size_t have = b->off < b->len ? b->len - b->off : 0;
	if (have > n)
		have = n;
	memcpy(v, b->p + b->off, have);
	memset((uint8_t *)v + have, 0, n - have);
	b->off += n;
}
static uint32_t get32(struct buf *b) { uint32_t v; get(b, &v, 4); return v; }
static uint64_t get64(struct buf *b) { uint64_t v; get(b, &v, 8); return v; }
static __attribute__((unused)) double getf64(struct buf *b) { double v; get(b, &v, 8); return v; }

/* getstr copies the reply's string into out (len bytes, NUL-terminated),
 * or says INSUFFICIENT_SIZE. */
static nvmlReturn_t getstr(struct buf *b, char *out, unsigned int len) {
	uint32_t n = get32(b);
	if (!out)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (n + 1 > len)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	get(b, out, n);
	out[n] = 0;
	return NVML_SUCCESS;
}

static int full(int fd, void *p, size_t n, int writing) {
	uint8_t *c = p;
	while (n > 0) {
		ssize_t k = writing ? write(fd, c, n) : read(fd, c, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		c += k;
		n -= (size_t)k;
	}
	return 0;
}

static int dial(void) {
	const char *path = getenv("GPUXRAY_NVMLFAKE_SOCKET");
	struct sockaddr_un a;
	if (!path || strlen(path) >= sizeof(a.sun_path))
		return -1;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	memset(&a, 0, sizeof(a));
	a.sun_family = AF_UNIX;
	strcpy(a.sun_path, path);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* call sends op with req's payload and reads the reply into rep. A lost
 * simulator reads as an unloaded driver. */
static nvmlReturn_t call(uint32_t op, struct buf *req, struct buf *rep) {
	uint32_t hdr[2] = {op, (uint32_t)req->len};
	uint32_t rhdr[2];
	nvmlReturn_t ret = NVML_ERROR_DRIVER_NOT_LOADED;
	pthread_mutex_lock(&mu);
	if (sock < 0)
		sock = dial();
	if (sock < 0)
		goto out;
	if (full(sock, hdr, sizeof(hdr), 1) < 0 || (req->len > 0 && full(sock, req->p, req->len, 1) < 0) ||
	    full(sock, rhdr, sizeof(rhdr), 0) < 0)
		goto broken;
	if (rep->cap < rhdr[1] + 1) {
		rep->cap = rhdr[1] + 1;
		rep->p = realloc(rep->p, rep->cap);
		if (!rep->p)
			abort();
	}
	if (rhdr[1] > 0 && full(sock, rep->p, rhdr[1], 0) < 0)
		goto broken;
	rep->len = rhdr[1];
	rep->off = 0;
	ret = (nvmlReturn_t)rhdr[0];
	goto out;
broken:
	close(sock);
	sock = -1;
out:
	pthread_mutex_unlock(&mu);
	free(req->p);
	return ret;
}

static uint32_t id_of(nvmlDevice_t d) { return d.handle ? d.handle->id : 0xffffffffu; }

static nvmlDevice_t device_of(uint32_t id) {
	nvmlDevice_t d = {0};
	if (id < MAX_HANDLES) {
		devices[id].id = id;
		d.handle = &devices[id];
	}
	return d;
}

/* one_dev makes a request of one device handle. */
static struct buf one_dev(nvmlDevice_t d) {
	struct buf b = {0};
	put32(&b, id_of(d));
	return b;
}

#define REPLY struct buf rep = {0}; nvmlReturn_t ret
#define DONE(r) do { free(rep.p); return (r); } while (0)

/* Library */

EXPORT nvmlReturn_t nvmlInit_v2(void) {
	struct buf req = {0};
	REPLY = call(OP_INIT, &req, &rep);
	DONE(ret);
}
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return nvmlInit_v2(); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
	struct buf req = {0};
	REPLY = call(OP_SHUTDOWN, &req, &rep);
	DONE(ret);
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
	switch (r) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	case NVML_ERROR_TIMEOUT: return "Timeout";
	case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
	case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
	case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
	default: return "Unknown Error";
	}
}

static nvmlReturn_t string_op(uint32_t op, struct buf req, char *out, unsigned int len) {
	REPLY = call(op, &req, &rep);
	if (ret == NVML_SUCCESS)
		ret = getstr(&rep, out, len);
	DONE(ret);
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
	return string_op(OP_DRIVER_VERSION, (struct buf){0}, version, length);
}
EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
	return string_op(OP_NVML_VERSION, (struct buf){0}, version, length);
}

static nvmlReturn_t u32_op(uint32_t op, struct buf req, unsigned int *out) {
	REPLY = call(op, &req, &rep);
	if (!out)
		DONE(NVML_ERROR_INVALID_ARGUMENT);
	if (ret == NVML_SUCCESS)
		*out = get32(&rep);
	DONE(ret);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { return u32_op(OP_CUDA_VERSION, (struct buf){0}, (unsigned int *)v); }
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return u32_op(OP_CUDA_VERSION, (struct buf){0}, (unsigned int *)v); }

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) { return u32_op(OP_COUNT, (struct buf){0}, count); }
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

static nvmlReturn_t handle_op(uint32_t op, struct buf req, nvmlDevice_t *out) {
	REPLY = call(op, &req, &rep);
	if (!out)
		DONE(NVML_ERROR_INVALID_ARGUMENT);
	if (ret == NVML_SUCCESS)
		*out = device_of(get32(&rep));
	DONE(ret);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
	struct buf b = {0};
	put32(&b, index);
	return handle_op(OP_HANDLE_BY_INDEX, b, device);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
	return nvmlDeviceGetHandleByIndex_v2(index, device);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
	struct buf b = {0};
	if (!uuid)
		return NVML_ERROR_INVALID_ARGUMENT;
	putstr(&b, uuid);
	return handle_op(OP_HANDLE_BY_UUID, b, device);
}

/* Device identity */

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
	return string_op(OP_UUID, one_dev(d), uuid, length);
}
EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
	return string_op(OP_NAME, one_dev(d), name, length);
}
EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index) { return u32_op(OP_INDEX, one_dev(d), index); }
EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor) { return u32_op(OP_MINOR, one_dev(d), minor); }

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
	struct buf req = one_dev(d);
	REPLY = call(OP_MIG_MODE, &req, &rep);
	if (!current || !pending)
		DONE(NVML_ERROR_INVALID_ARGUMENT);
	if (ret == NVML_SUCCESS) {
		*current = get32(&rep);
		*pending = get32(&rep);
	}
	DONE(ret);
}

/* Activity */

/* nvml.h: "If samples is NULL then sampleCount will contain the number of
 * samples that can be queried" — the ring's size, here the answer's. */
EXPORT nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t d, nvmlSamplingType_t type, unsigned long long lastSeen,
                                         nvmlValueType_t *valType, unsigned int *count, nvmlSample_t *samples) {
	struct buf req = one_dev(d);
	put32(&req, (uint32_t)type);
	put64(&req, lastSeen);
	REPLY = call(OP_SAMPLES, &req, &rep);
	if (!valType || !count)
		DONE(NVML_ERROR_INVALID_ARGUMENT);
	if (ret != NVML_SUCCESS)
		DONE(ret);
	*valType = (nvmlValueType_t)get32(&rep);
	uint32_t n = get32(&rep);
	if (!samples) {
		*count = n;
		DONE(NVML_SUCCESS);
	}
	if (n > *count)
		n = *count;
	for (uint32_t i = 0; i < n; i++) {
		samples[i].timeStamp = get64(&rep);
		get(&rep, &samples[i].sampleValue, 8);
	}
	*count = n;
	DONE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *util,
                                                    unsigned int *count, unsigned long long lastSeen) {
	struct buf req = one_dev(d);
	put64(&req, lastSeen);
	REPLY = call(OP_PROCESS_UTILIZATION, &req, &rep);
	if (!count)
		DONE(NVML_ERROR_INVALID_ARGUMENT);
	if (ret != NVML_SUCCESS)
		DONE(ret);
	uint32_t n = get32(&rep);
	if (!util) {
		*count = n;
		DONE(NVML_ERROR_INSUFFICIENT_SIZE);
	}
	/* nvml.h: called again with a buffer of *count entries, it "updates
	 * processSamplesCount with the number of process utilization sample
	 * structures that were actually written", which "may differ from a
	 * previously read value": the table may have grown since the first
	 * call, and the buffer takes what fits. */
	if (n > *count)
		n = *count;
	for (uint32_t i = 0; i < n; i++) {
		util[i].pid = get32(&rep);
		util[i].timeStamp = get64(&rep);
		util[i].smUtil = get32(&rep);
		util[i].memUtil = get32(&rep);
		util[i].encUtil = get32(&rep);
		util[i].decUtil = get32(&rep);
	}
	*count = n;
	DONE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
	struct buf req = one_dev(d);
	REPLY = call(OP_UTILIZATION_RATES, &req, &rep);
	if (!u)
		DONE(NVML_ERROR_INVALID_ARGUMENT);
	if (ret == NVML_SUCCESS) {
		u->gpu = get32(&rep);
		u->memory = get32(&rep);
	}
	DONE(ret);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
	struct buf req = one_dev(d);
	REPLY = call(OP_MEMORY, &req, &rep);
	if (!m)
		DONE(NVML_ERROR_INVALID_ARGUMENT);
	if (ret == NVML_SUCCESS) {
		m->total = get64(&rep);
		m->free = get64(&rep);
		m->used = get64(&rep);
	}
	DONE(ret);
}

#ifndef FAKE_R470
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
	if (!m)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (m->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	struct buf req = one_dev(d);
	REPLY = call(OP_MEMORY_V2, &req, &rep);
	if (ret == NVML_SUCCESS) {
		m->total = get64(&rep);
		m->reserved = get64(&rep);
		m->free = get64(&rep);
		m->used = get64(&rep);
	}
	DONE(ret);
}
#endif

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) { return u32_op(OP_POWER, one_dev(d), mw); }

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj) {
	struct buf req = one_dev(d);
	REPLY = call(OP_ENERGY, &req, &rep);
	if (!mj)
		DONE(NVML_ERROR_INVALID_ARGUMENT);
	if (ret == NVML_SUCCESS)
		*mj = get64(&rep);
	DONE(ret);
}

/* Process lists. stride is the entry size the symbol writes: 16 for v1
 * (pid, usedGpuMemory), 24 for v2 and v3 (nvmlProcessInfo_t), 32 for the
 * 535.43-535.86 v3 (with usedGpuCcProtectedMemory). */
static nvmlReturn_t processes(nvmlDevice_t d, uint32_t list, unsigned int *count, void *infos, size_t stride) {
	struct buf req = one_dev(d);
	put32(&req, list);
	REPLY = call(OP_PROCESSES, &req, &rep);
	if (!count)
		DONE(NVML_ERROR_INVALID_ARGUMENT);
	if (ret != NVML_SUCCESS)
		DONE(ret);
	uint32_t n = get32(&rep);
	if (*count < n) {
		*count = n;
		DONE(NVML_ERROR_INSUFFICIENT_SIZE);
	}
	if (n > 0 && !infos)
		DONE(NVML_ERROR_INVALID_ARGUMENT);
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *e = (uint8_t *)infos + i * stride;
		uint32_t pid = get32(&rep), gi, ci;
		uint64_t mem = get64(&rep), cc = 0;
		gi = get32(&rep);
		ci = get32(&rep);
		memset(e, 0, stride);
		memcpy(e, &pid, 4);
		memcpy(e + 8, &mem, 8);
		if (stride >= 24) {
			memcpy(e + 16, &gi, 4);
			memcpy(e + 20, &ci, 4);
		}
		if (stride >= 32)
			memcpy(e + 24, &cc, 8);
	}
	*count = n;
	DONE(NVML_SUCCESS);
}

#ifndef FAKE_V3_STRIDE
#define FAKE_V3_STRIDE 24
#endif

#define PROCESS_LISTS(name, list)                                                                          \
	EXPORT nvmlReturn_t name(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v1_t *infos) {      \
		return processes(d, list, count, infos, sizeof(nvmlProcessInfo_v1_t));                      \
	}                                                                                                  \
	EXPORT nvmlReturn_t name##_v2(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v2_t *infos) { \
		return processes(d, list, count, infos, sizeof(nvmlProcessInfo_v2_t));                      \
	}                                                                                                  \
	V3(name, list)

#ifdef FAKE_R470
#define V3(name, list)
#else
#define V3(name, list)                                                                                  \
	EXPORT nvmlReturn_t name##_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos) { \
		return processes(d, list, count, infos, FAKE_V3_STRIDE);                                 \
	}
#endif

PROCESS_LISTS(nvmlDeviceGetComputeRunningProcesses, LIST_COMPUTE)
PROCESS_LISTS(nvmlDeviceGetGraphicsRunningProcesses, LIST_GRAPHICS)
PROCESS_LISTS(nvmlDeviceGetMPSComputeRunningProcesses, LIST_MPS)

/* MIG */

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count) {
	return u32_op(OP_MAX_MIG, one_dev(d), count);
}
EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index, nvmlDevice_t *mig) {
	struct buf b = one_dev(d);
	put32(&b, index);
	return handle_op(OP_MIG_HANDLE, b, mig);
}
EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *d) {
	return handle_op(OP_PARENT, one_dev(mig), d);
}
EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *is) { return u32_op(OP_IS_MIG, one_dev(d), is); }
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id) { return u32_op(OP_GPU_INSTANCE_ID, one_dev(d), id); }
EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int *id) {
	return u32_op(OP_COMPUTE_INSTANCE_ID, one_dev(d), id);
}

EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t d, nvmlDeviceAttributes_t *a) {
	struct buf req = one_dev(d);
	REPLY = call(OP_ATTRIBUTES, &req, &rep);
	if (!a)
		DONE(NVML_ERROR_INVALID_ARGUMENT);
	if (ret == NVML_SUCCESS) {
		a->multiprocessorCount = get32(&rep);
		a->sharedCopyEngineCount = get32(&rep);
		a->sharedDecoderCount = get32(&rep);
		a->sharedEncoderCount = get32(&rep);
		a->sharedJpegCount = get32(&rep);
		a->sharedOfaCount = get32(&rep);
		a->gpuInstanceSliceCount = get32(&rep);
		a->computeInstanceSliceCount = get32(&rep);
		a->memorySizeMB = get64(&rep);
	}
	DONE(ret);
}
EXPORT nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t d, nvmlDeviceAttributes_t *a) { return nvmlDeviceGetAttributes_v2(d, a); }

/* GPM (R520) */

#ifndef FAKE_R470
EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t d, nvmlGpmSupport_t *s) {
	if (!s)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (s->version != NVML_GPM_SUPPORT_VERSION)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	return u32_op(OP_GPM_SUPPORT, one_dev(d), &s->isSupportedDevice);
}

EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *s) {
	uint32_t id;
	if (!s)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t ret = u32_op(OP_GPM_ALLOC, (struct buf){0}, &id);
	if (ret != NVML_SUCCESS)
		return ret;
	s->handle = malloc(sizeof(struct nvmlGpmSample_st));
	if (!s->handle)
		return NVML_ERROR_MEMORY;
	s->handle->id = id;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t s) {
	if (!s.handle)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct buf req = {0};
	put32(&req, s.handle->id);
	/* Poisoned before it is freed: a later use of this sample is seen. */
	s.handle->id = 0xdeadbeefu;
	free(s.handle);
	REPLY = call(OP_GPM_FREE, &req, &rep);
	DONE(ret);
}

EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t d, nvmlGpmSample_t s) {
	if (!s.handle)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct buf req = one_dev(d);
	put32(&req, s.handle->id);
	REPLY = call(OP_GPM_GET, &req, &rep);
	DONE(ret);
}

EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t d, unsigned int gi, nvmlGpmSample_t s) {
	if (!s.handle)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct buf req = one_dev(d);
	put32(&req, gi);
	put32(&req, s.handle->id);
	REPLY = call(OP_GPM_MIG_GET, &req, &rep);
	DONE(ret);
}

EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m) {
	if (!m || !m->sample1.handle || !m->sample2.handle || m->numMetrics > NVML_GPM_METRIC_MAX)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (m->version != NVML_GPM_METRICS_GET_VERSION)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	struct buf req = {0};
	put32(&req, m->sample1.handle->id);
	put32(&req, m->sample2.handle->id);
	put32(&req, m->numMetrics);
	for (unsigned int i = 0; i < m->numMetrics; i++)
		put32(&req, m->metrics[i].metricId);
	REPLY = call(OP_GPM_METRICS, &req, &rep);
	if (ret == NVML_SUCCESS) {
		for (unsigned int i = 0; i < m->numMetrics; i++) {
			m->metrics[i].nvmlReturn = (nvmlReturn_t)get32(&rep);
			m->metrics[i].value = getf64(&rep);
		}
	}
	DONE(ret);
}
#endif
