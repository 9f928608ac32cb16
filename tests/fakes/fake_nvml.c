/* Test double for libnvidia-ml.so.1 (tokenwatt tests): just enough of the NVML C ABI for the
 * `board` power source and the hardware inventory, driven through the *real* nvidia-ml-py
 * (pynvml) ctypes bindings. Written for tokenwatt after ../shared/peers/power.md, Appendix A.
 *
 * State is re-read from $FAKE_NVML_STATE (key=value lines) on every call, so a test can change
 * power, energy and clock-event reasons while a sampler runs. A key may be given per device as
 * `key.N` (device index N), which wins over the plain `key`.
 *   keys: count name driver power_mw energy_mj reasons limit_mw enforced_mw min_limit_mw
 *         max_limit_mw mem_clock_mhz sm_clock_mhz bus_width mem_total_mib init
 *   values: a number, or an error: NA (NVML_ERROR_NOT_SUPPORTED 3), LOST (GPU is lost 15),
 *           NOPERM (no permission 4), UNKNOWN (999). `init=NODRIVER` makes nvmlInit fail with
 *           NVML_ERROR_DRIVER_NOT_LOADED (9).
 * Build (the tests do this in a temporary folder):
 *   gcc -shared -fPIC -O2 -Wl,-soname,libnvidia-ml.so.1 -o DIR/libnvidia-ml.so.1 fake_nvml.c
 * Add -DNO_CLOCKS_EVENT_API for a pre-R535 driver, which lacks the symbol
 * nvmlDeviceGetCurrentClocksEventReasons (only ...ClocksThrottleReasons exists).
 * Use: LD_LIBRARY_PATH=DIR FAKE_NVML_STATE=state.txt python -c 'import pynvml; pynvml.nvmlInit()'
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvmlReturn_t;
typedef struct { int index; } dev_t_;
typedef dev_t_ *nvmlDevice_t;

enum { OK = 0, UNINIT = 1, INVALID = 2, NOT_SUPPORTED = 3, NO_PERMISSION = 4,
       DRIVER_NOT_LOADED = 9, FUNCTION_NOT_FOUND = 13, GPU_LOST = 15, UNKNOWN = 999 };

static dev_t_ devs[64];
static int inited;

/* Value of `key.index` (index >= 0) or else `key` from the state file; 1 if found. */
static int get(const char *key, int index, char *out, size_t n)
{
    const char *path = getenv("FAKE_NVML_STATE");
    char line[512], dkey[96];
    FILE *f;
    int found = 0, found_dev = 0;
    size_t kl = strlen(key), dl;
    if (!path || !(f = fopen(path, "r"))) return 0;
    snprintf(dkey, sizeof dkey, "%s.%d", key, index);
    dl = strlen(dkey);
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (index >= 0 && !strncmp(line, dkey, dl) && line[dl] == '=') {
            snprintf(out, n, "%s", line + dl + 1); found = found_dev = 1;
        } else if (!found_dev && !strncmp(line, key, kl) && line[kl] == '=') {
            snprintf(out, n, "%s", line + kl + 1); found = 1;
        }
    }
    fclose(f);
    return found;
}

static nvmlReturn_t error_code(const char *b)
{
    if (!strcmp(b, "NA")) return NOT_SUPPORTED;
    if (!strcmp(b, "LOST")) return GPU_LOST;
    if (!strcmp(b, "NOPERM")) return NO_PERMISSION;
    if (!strcmp(b, "UNKNOWN")) return UNKNOWN;
    return OK;
}

static nvmlReturn_t getu64(const char *key, int index, unsigned long long dflt,
                           unsigned long long *v)
{
    char b[96];
    nvmlReturn_t r;
    if (!inited) return UNINIT;
    if (!get(key, index, b, sizeof b)) { *v = dflt; return OK; }
    if ((r = error_code(b)) != OK) return r;
    *v = strtoull(b, NULL, 0);
    return OK;
}

static nvmlReturn_t getu32(const char *key, int index, unsigned long long dflt, unsigned int *v)
{
    unsigned long long t;
    nvmlReturn_t r;
    if (!v) return INVALID;
    if ((r = getu64(key, index, dflt, &t)) != OK) return r;
    *v = (unsigned int)t;
    return OK;
}

#define DEV(d) do { if (!inited) return UNINIT; if (!(d)) return INVALID; } while (0)

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    char b[32];
    (void)flags;
    if (get("init", -1, b, sizeof b) && !strcmp(b, "NODRIVER")) return DRIVER_NOT_LOADED;
    inited = 1;
    return OK;
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlShutdown(void) { if (!inited) return UNINIT; inited = 0; return OK; }

const char *nvmlErrorString(nvmlReturn_t r)
{
    switch (r) {
    case OK: return "Success";
    case UNINIT: return "Uninitialized";
    case INVALID: return "Invalid Argument";
    case NOT_SUPPORTED: return "Not Supported";
    case NO_PERMISSION: return "Insufficient Permissions";
    case DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case FUNCTION_NOT_FOUND: return "Function Not Found";
    case GPU_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int n)
{
    char b[80] = "550.54.15";
    if (!inited) return UNINIT;
    get("driver", -1, b, sizeof b);
    snprintf(v, n, "%s", b);
    return OK;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *c) { return getu32("count", -1, 1, c); }
nvmlReturn_t nvmlDeviceGetCount(unsigned int *c) { return getu32("count", -1, 1, c); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
    unsigned long long c;
    nvmlReturn_t r = getu64("count", -1, 1, &c);
    if (r) return r;
    if (i >= c || i >= 64 || !d) return INVALID;
    devs[i].index = (int)i;
    *d = &devs[i];
    return OK;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d)
{
    return nvmlDeviceGetHandleByIndex_v2(i, d);
}
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *i)
{
    DEV(d);
    *i = (unsigned int)d->index;
    return OK;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int n)
{
    char b[96] = "NVIDIA H100 80GB HBM3";
    DEV(d);
    get("name", d->index, b, sizeof b);
    snprintf(name, n, "%s", b);
    return OK;
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *u, unsigned int n)
{
    DEV(d);
    snprintf(u, n, "GPU-00000000-0000-0000-0000-%012d", d->index);
    return OK;
}

/* milliwatts */
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *p)
{
    DEV(d);
    return getu32("power_mw", d->index, 350000, p);
}
/* millijoules since the driver was loaded */
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *e)
{
    DEV(d);
    return getu64("energy_mj", d->index, 0, e);
}
#ifndef NO_CLOCKS_EVENT_API
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *r)
{
    DEV(d);
    return getu64("reasons", d->index, 0, r);
}
#endif
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *r)
{
    DEV(d);
    return getu64("reasons", d->index, 0, r);
}
nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned int *l)
{
    DEV(d);
    return getu32("limit_mw", d->index, 700000, l);
}
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *l)
{
    DEV(d);
    return getu32("enforced_mw", d->index, 700000, l);
}
nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t d, unsigned int *lo,
                                                          unsigned int *hi)
{
    nvmlReturn_t r;
    DEV(d);
    if ((r = getu32("min_limit_mw", d->index, 200000, lo)) != OK) return r;
    return getu32("max_limit_mw", d->index, 700000, hi);
}
nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t d, unsigned int *w)
{
    DEV(d);
    return getu32("bus_width", d->index, 5120, w);
}
/* clock type: 0 graphics, 1 sm, 2 mem, 3 video */
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, int type, unsigned int *mhz)
{
    DEV(d);
    if (type == 2) return getu32("mem_clock_mhz", d->index, 2619, mhz);
    return getu32("sm_clock_mhz", d->index, 1980, mhz);
}
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz)
{
    return nvmlDeviceGetMaxClockInfo(d, type, mhz);
}

typedef struct { unsigned long long total, free, used; } memory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } memory_v2_t;
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, memory_t *m)
{
    unsigned long long mib;
    nvmlReturn_t r;
    DEV(d);
    if (!m) return INVALID;
    if ((r = getu64("mem_total_mib", d->index, 81559, &mib)) != OK) return r;
    m->total = mib << 20; m->used = 0; m->free = m->total;
    return OK;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, memory_v2_t *m)
{
    memory_t v1;
    nvmlReturn_t r;
    if (!m) return INVALID;
    if ((r = nvmlDeviceGetMemoryInfo(d, &v1)) != OK) return r;
    m->total = v1.total; m->reserved = 0; m->free = v1.free; m->used = v1.used;
    return OK;
}
