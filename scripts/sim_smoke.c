/* Loads a built simulator (argv[1]), subscribes, enables the runtime domain, makes 10 simulated
 * calls and checks that 20 callbacks (ENTER + EXIT) came: run under qemu-user by build_wheels.sh to
 * show that the aarch64 wheel's simulator works on aarch64, not only that it is an aarch64 file. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

typedef void (*cb_t)(void *, uint32_t, uint32_t, const void *);
static int callbacks;
static void on_callback(void *ud, uint32_t domain, uint32_t cbid, const void *data) {
    (void)ud; (void)domain; (void)cbid; (void)data;
    callbacks++;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: sim_smoke LIBMSPTI_SIM\n"); return 2; }
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    int (*subscribe)(void **, cb_t, void *) = (int (*)(void **, cb_t, void *))dlsym(h, "msptiSubscribe");
    int (*enable)(uint32_t, void *, uint32_t) = (int (*)(uint32_t, void *, uint32_t))dlsym(h, "msptiEnableDomain");
    int (*call)(uint32_t, uint64_t) = (int (*)(uint32_t, uint64_t))dlsym(h, "msimCall");
    if (!subscribe || !enable || !call) { fprintf(stderr, "missing symbols\n"); return 1; }
    void *sub = 0;
    if (subscribe(&sub, on_callback, 0) != 0 || enable(1, sub, 1) != 0) { fprintf(stderr, "subscribe\n"); return 1; }
    for (int i = 0; i < 10; i++) call(0, 1000);
    printf("%d callbacks\n", callbacks);
    return callbacks == 20 ? 0 : 1;
}
