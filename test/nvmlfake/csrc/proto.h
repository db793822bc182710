/*
 * The wire protocol between the fake libnvidia-ml.so.1 (libnvml.c) and its
 * driver (server.go), over a unix socket. A request is a u32 op, a u32
 * payload length and the payload; a reply a u32 nvmlReturn_t, a u32 length
 * and the payload. Numbers are little-endian; a string is a u32 length and
 * its bytes. proto_test.go checks that server.go's ops are these.
 */
#ifndef NVMLFAKE_PROTO_H
#define NVMLFAKE_PROTO_H

enum {
	OP_INIT = 1,
	OP_SHUTDOWN = 2,
	OP_DRIVER_VERSION = 3,
	OP_COUNT = 4,
	OP_HANDLE_BY_INDEX = 5,
	OP_HANDLE_BY_UUID = 6,
	OP_UUID = 7,
	OP_NAME = 8,
	OP_INDEX = 9,
	OP_MINOR = 10,
	OP_MIG_MODE = 11,
	OP_SAMPLES = 12,
	OP_PROCESS_UTILIZATION = 13,
	OP_MEMORY = 14,
	OP_MEMORY_V2 = 15,
	OP_POWER = 16,
	OP_ENERGY = 17,
	OP_PROCESSES = 18,
	OP_MAX_MIG = 19,
	OP_MIG_HANDLE = 20,
	OP_GPU_INSTANCE_ID = 21,
	OP_COMPUTE_INSTANCE_ID = 22,
	OP_ATTRIBUTES = 23,
	OP_PARENT = 24,
	OP_IS_MIG = 25,
	OP_UTILIZATION_RATES = 26,
	OP_GPM_SUPPORT = 27,
	OP_GPM_ALLOC = 28,
	OP_GPM_FREE = 29,
	OP_GPM_GET = 30,
	OP_GPM_MIG_GET = 31,
	OP_GPM_METRICS = 32,
	OP_NVML_VERSION = 33,
	OP_CUDA_VERSION = 34,
};

/* The process lists of OP_PROCESSES. */
enum {
	LIST_COMPUTE = 0,
	LIST_GRAPHICS = 1,
	LIST_MPS = 2,
};

#endif
