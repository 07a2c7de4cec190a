/* Scenario 3 of the Callback API guide: data shared between a call's ENTER and its EXIT, here
 * the time the call entered, to print its duration. The guide keeps it in
 * cbdata->correlationData; MSPTI fills only callbackSite and functionName (the rest of the struct
 * is whatever was on its stack), so this keeps it where it cannot be lost: on a per-thread stack,
 * pushed at ENTER and popped at EXIT, which pairs nested calls too. Usage: enter_exit_shared [STEPS] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mspti.h"
#include "work.h"

#define DEPTH 64

static _Thread_local struct {
    const char *name;
    uint64_t start_ns;
} stack[DEPTH];
static _Thread_local int depth;

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void on_call(void *userdata, msptiCallbackDomain domain, msptiCallbackId cbid,
                    const msptiCallbackData *cbdata)
{
    (void)userdata;
    (void)cbid;
    if (domain != MSPTI_CB_DOMAIN_RUNTIME) return;
    if (cbdata->callbackSite == MSPTI_API_ENTER) {
        if (depth < DEPTH) {
            stack[depth].name = cbdata->functionName;
            stack[depth].start_ns = now_ns();
        }
        depth++;
        printf("[ENTER] %s\n", cbdata->functionName);
        return;
    }
    uint64_t end = now_ns();
    if (depth == 0) {
        printf("[EXIT] %s unpaired\n", cbdata->functionName);
        return;
    }
    depth--;
    if (depth >= DEPTH) return;
    if (strcmp(stack[depth].name, cbdata->functionName) != 0) {
        printf("[EXIT] %s paired with %s\n", cbdata->functionName, stack[depth].name);
        return;
    }
    printf("[EXIT] %s duration_ns=%llu\n", cbdata->functionName, (unsigned long long)(end - stack[depth].start_ns));
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 3;
    msptiSubscriberHandle subscriber;
    if (msptiSubscribe(&subscriber, on_call, NULL) != MSPTI_SUCCESS) return 1;
    if (msptiEnableDomain(1, subscriber, MSPTI_CB_DOMAIN_RUNTIME) != MSPTI_SUCCESS) return 2;
    ScenarioWork *w = scenario_open();
    if (w == NULL || scenario_steps(w, steps) || scenario_close(w)) return 3;
    msptiUnsubscribe(subscriber);
    return 0;
}
