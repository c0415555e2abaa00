/* A stand-in for libnvidia-ml.so.1 with one GPU at FAKE_PCI, registered in a fabric
 * cluster, for the tests of fabric_domain.rs on machines without NVML. The clique id
 * says which query answered (3: versioned v3, 2: versioned v2, 1: unversioned).
 * Variants: FAKE_V2 (the versioned query knows only v2), FAKE_V1 (no versioned
 * query), FAKE_NO_QUERY (no fabric query at all), FAKE_INIT_FAILS. */
#include <string.h>

typedef struct {
    unsigned int version;
    unsigned char clusterUuid[16];
    unsigned int status;
    unsigned int cliqueId;
    unsigned char state;
    unsigned int healthMask;
} v2_t;

/* v3 is v2 with one more field at the end. */
typedef struct {
    v2_t v2;
    unsigned char healthSummary;
} v3_t;

typedef struct {
    unsigned char clusterUuid[16];
    unsigned int status;
    unsigned int cliqueId;
    unsigned char state;
} v1_t;

#define V2_TAG ((unsigned int)sizeof(v2_t) | (2u << 24))
#define V3_TAG ((unsigned int)sizeof(v3_t) | (3u << 24))

static int inits, shutdowns, the_device;

int fake_inits(void) { return inits; }
int fake_shutdowns(void) { return shutdowns; }

unsigned int nvmlInit_v2(void) {
#ifdef FAKE_INIT_FAILS
    return 9; /* NVML_ERROR_DRIVER_NOT_LOADED */
#else
    inits++;
    return 0;
#endif
}

unsigned int nvmlShutdown(void) {
    if (shutdowns >= inits) return 1; /* NVML_ERROR_UNINITIALIZED */
    shutdowns++;
    return 0;
}

const char *nvmlErrorString(unsigned int code) {
    switch (code) {
    case 0: return "Success";
    case 2: return "Invalid Argument";
    case 6: return "Not Found";
    case 9: return "Driver Not Loaded";
    case 25: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

unsigned int nvmlDeviceGetHandleByPciBusId_v2(const char *pci, void **device) {
    if (strcmp(pci, FAKE_PCI) != 0) return 6;
    *device = &the_device;
    return 0;
}

static void fill(unsigned char *uuid, unsigned int *status, unsigned int *clique,
                 unsigned char *state, unsigned int answered_by) {
    for (int i = 0; i < 16; i++) uuid[i] = (unsigned char)(0xa0 + i);
    *status = 0;
    *clique = answered_by;
    *state = 3; /* NVML_GPU_FABRIC_STATE_COMPLETED */
}

static void fill_v2(v2_t *v, unsigned int answered_by) {
    fill(v->clusterUuid, &v->status, &v->cliqueId, &v->state, answered_by);
    v->healthMask = 0;
}

#if !defined(FAKE_V1) && !defined(FAKE_NO_QUERY)
unsigned int nvmlDeviceGetGpuFabricInfoV(void *device, void *info) {
    unsigned int version = *(unsigned int *)info;
    if (device != &the_device) return 2;
#ifndef FAKE_V2
    if (version == V3_TAG) {
        v3_t *v = info;
        fill_v2(&v->v2, 3);
        v->healthSummary = 0;
        return 0;
    }
#endif
    if (version == V2_TAG) {
        fill_v2(info, 2);
        return 0;
    }
    return 25; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
}
#endif

#ifndef FAKE_NO_QUERY
unsigned int nvmlDeviceGetGpuFabricInfo(void *device, v1_t *info) {
    if (device != &the_device) return 2;
    fill(info->clusterUuid, &info->status, &info->cliqueId, &info->state, 1);
    return 0;
}
#endif
