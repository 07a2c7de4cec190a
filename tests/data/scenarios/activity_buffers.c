/* The Activity API on its own: buffers handed to MSPTI, KERNEL, COMMUNICATION and MEMCPY records
 * collected, walked with msptiActivityGetNextRecord and read through the header's structs.
 * Prints the kernels and collectives by name, the copies by direction, and each kind's record
 * size as found in the buffers beside the struct's sizeof. Usage: activity_buffers [STEPS] */
#include <stdio.h>
#include <stdlib.h>

#include "buffers.h"
#include "mspti.h"
#include "tally.h"
#include "work.h"

static Tally kernels = {.label = "kernel"}, collectives = {.label = "communication"},
             copies = {.label = "memcpy"};
static size_t seen[MSPTI_ACTIVITY_KIND_COUNT];
static unsigned long odd_sizes;

static const char *direction(msptiActivityMemcpyKind kind)
{
    static const char *names[] = {"UNKNOWN", "HTOH", "HTOD", "DTOH", "DTOD", "DEFAULT"};
    return (unsigned)kind < sizeof names / sizeof names[0] ? names[kind] : "?";
}

static size_t struct_size(msptiActivityKind kind)
{
    switch (kind) {
    case MSPTI_ACTIVITY_KIND_KERNEL: return sizeof(msptiActivityKernel);
    case MSPTI_ACTIVITY_KIND_COMMUNICATION: return sizeof(msptiActivityCommunication);
    case MSPTI_ACTIVITY_KIND_MEMCPY: return sizeof(msptiActivityMemcpy);
    default: return 0;
    }
}

static void on_record(const msptiActivity *record, size_t bytes)
{
    if ((unsigned)record->kind < MSPTI_ACTIVITY_KIND_COUNT) seen[record->kind] = bytes;
    if (bytes != struct_size(record->kind)) odd_sizes++;
    switch (record->kind) {
    case MSPTI_ACTIVITY_KIND_KERNEL: tally_add(&kernels, ((const msptiActivityKernel *)record)->name); break;
    case MSPTI_ACTIVITY_KIND_COMMUNICATION:
        tally_add(&collectives, ((const msptiActivityCommunication *)record)->name);
        break;
    case MSPTI_ACTIVITY_KIND_MEMCPY: tally_add(&copies, direction(((const msptiActivityMemcpy *)record)->copyKind)); break;
    default: break;
    }
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 3;
    msptiSubscriberHandle subscriber;
    /* No callback: a subscriber for activity records only. */
    if (msptiSubscribe(&subscriber, NULL, NULL) != MSPTI_SUCCESS) return 1;
    if (buffers_register() || msptiActivityEnable(MSPTI_ACTIVITY_KIND_KERNEL)
        || msptiActivityEnable(MSPTI_ACTIVITY_KIND_COMMUNICATION) || msptiActivityEnable(MSPTI_ACTIVITY_KIND_MEMCPY))
        return 2;
    ScenarioWork *w = scenario_open();
    if (w == NULL || scenario_steps(w, steps) || scenario_close(w)) return 3;
    /* Unsubscribing delivers the records of the work the device has done; the flush hands
     * every buffer that holds one back. */
    msptiUnsubscribe(subscriber);
    msptiActivityFlushAll(1);
    size_t records = buffers_walk(on_record);
    tally_print(&kernels);
    tally_print(&collectives);
    tally_print(&copies);
    for (int k = 0; k < MSPTI_ACTIVITY_KIND_COUNT; k++)
        if (seen[k]) printf("record-size %d %zu %zu\n", k, seen[k], struct_size((msptiActivityKind)k));
    printf("records %zu odd-sizes %lu\n", records, odd_sizes);
    return 0;
}
