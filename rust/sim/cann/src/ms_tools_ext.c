/* The simulated libms_tools_ext.so: MSTX (mstx/ms_tools_ext.h). MSTX calls do nothing unless a
 * profiler has injected itself; in CANN, libmspti.so registers its handlers through an injection
 * table (upstream csrc/common/inject/mstx_inject.cpp). Here the injected profiler is a loaded
 * libmspti.so: each function finds the same-named handler in it (dlopen with RTLD_NOLOAD, so MSTX
 * never loads a profiler itself) and calls it, or does nothing. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "mstx/ms_tools_ext.h"

static void *profiler(void)
{
    static void *handle;
    if (handle == NULL) {
        char path[4096];
        const char *home = getenv("ASCEND_HOME_PATH");
        if (home != NULL && *home) {
            snprintf(path, sizeof path, "%s/lib64/libmspti.so", home);
            handle = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
        }
        if (handle == NULL) {
            handle = dlopen("libmspti.so", RTLD_LAZY | RTLD_NOLOAD);
        }
    }
    return handle;
}

static void *handler(const char *name)
{
    void *h = profiler();
    void *f = h == NULL ? NULL : dlsym(h, name);
    /* The profiler's handler, never this library's own function of the same name. */
    Dl_info self, found;
    if (f != NULL && dladdr(f, &found) && dladdr((void *)handler, &self) && found.dli_fbase == self.dli_fbase) {
        return NULL;
    }
    return f;
}

#define HANDLER(type, name) ((type)handler(name))

void mstxMarkA(const char *message, aclrtStream stream)
{
    void (*f)(const char *, aclrtStream) = HANDLER(void (*)(const char *, aclrtStream), "mstxMarkA");
    if (f != NULL) {
        f(message, stream);
    }
}

mstxRangeId mstxRangeStartA(const char *message, aclrtStream stream)
{
    mstxRangeId (*f)(const char *, aclrtStream) = HANDLER(mstxRangeId (*)(const char *, aclrtStream), "mstxRangeStartA");
    return f != NULL ? f(message, stream) : 0;
}

void mstxRangeEnd(mstxRangeId id)
{
    void (*f)(mstxRangeId) = HANDLER(void (*)(mstxRangeId), "mstxRangeEnd");
    if (f != NULL) {
        f(id);
    }
}

mstxDomainHandle_t mstxDomainCreateA(const char *name)
{
    mstxDomainHandle_t (*f)(const char *) = HANDLER(mstxDomainHandle_t (*)(const char *), "mstxDomainCreateA");
    return f != NULL ? f(name) : NULL;
}

void mstxDomainDestroy(mstxDomainHandle_t domain)
{
    void (*f)(mstxDomainHandle_t) = HANDLER(void (*)(mstxDomainHandle_t), "mstxDomainDestroy");
    if (f != NULL) {
        f(domain);
    }
}

void mstxDomainMarkA(mstxDomainHandle_t domain, const char *message, aclrtStream stream)
{
    void (*f)(mstxDomainHandle_t, const char *, aclrtStream) =
        HANDLER(void (*)(mstxDomainHandle_t, const char *, aclrtStream), "mstxDomainMarkA");
    if (f != NULL) {
        f(domain, message, stream);
    }
}

mstxRangeId mstxDomainRangeStartA(mstxDomainHandle_t domain, const char *message, aclrtStream stream)
{
    mstxRangeId (*f)(mstxDomainHandle_t, const char *, aclrtStream) =
        HANDLER(mstxRangeId (*)(mstxDomainHandle_t, const char *, aclrtStream), "mstxDomainRangeStartA");
    return f != NULL ? f(domain, message, stream) : 0;
}

void mstxDomainRangeEnd(mstxDomainHandle_t domain, mstxRangeId id)
{
    void (*f)(mstxDomainHandle_t, mstxRangeId) =
        HANDLER(void (*)(mstxDomainHandle_t, mstxRangeId), "mstxDomainRangeEnd");
    if (f != NULL) {
        f(domain, id);
    }
}
