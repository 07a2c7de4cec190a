/* Scenario 2 of the Callback API guide: only MSPTI_CBID_RUNTIME_LAUNCH traced; at each launch's
 * ENTER and EXIT an MSTX mark named after the launch function, on the stream the userdata
 * carries; MARKER and KERNEL activity collected beside it, so each kernel can be placed between
 * the marks of its launch. Prints the launches seen, the host marks by name, the device marks and
 * the kernels by name. Usage: launch_mstx [STEPS] */
#include <stdio.h>
#include <stdlib.h>

#include "buffers.h"
#include "mspti.h"
#include "mstx/ms_tools_ext.h"
#include "tally.h"
#include "work.h"

/* What the callback needs from the program: the stream to mark, set once the work has one. */
struct UserData {
    aclrtStream *stream;
};

static Tally launches = {.label = "launch"}, host_marks = {.label = "mark"}, kernels = {.label = "kernel"};
static unsigned long device_marks, foreign_userdata;
static struct UserData user;

static void on_launch(void *userdata, msptiCallbackDomain domain, msptiCallbackId cbid,
                      const msptiCallbackData *cbdata)
{
    if (domain != MSPTI_CB_DOMAIN_RUNTIME || cbid != MSPTI_CBID_RUNTIME_LAUNCH) return;
    struct UserData *ud = userdata;
    if (ud != &user) {
        foreign_userdata++;
        return;
    }
    if (cbdata->callbackSite == MSPTI_API_ENTER) tally_add(&launches, cbdata->functionName);
    mstxMarkA(cbdata->functionName, *ud->stream);
}

static void on_record(const msptiActivity *record, size_t bytes)
{
    (void)bytes;
    if (record->kind == MSPTI_ACTIVITY_KIND_KERNEL) {
        tally_add(&kernels, ((const msptiActivityKernel *)record)->name);
    } else if (record->kind == MSPTI_ACTIVITY_KIND_MARKER) {
        const msptiActivityMarker *m = (const msptiActivityMarker *)record;
        if (m->sourceKind == MSPTI_ACTIVITY_SOURCE_KIND_DEVICE) {
            device_marks++;
        } else {
            tally_add(&host_marks, m->name);
        }
    }
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 3;
    aclrtStream stream = NULL;
    user.stream = &stream;
    msptiSubscriberHandle subscriber;
    if (msptiSubscribe(&subscriber, on_launch, &user) != MSPTI_SUCCESS) return 1;
    if (msptiEnableCallback(1, subscriber, MSPTI_CB_DOMAIN_RUNTIME, MSPTI_CBID_RUNTIME_LAUNCH) != MSPTI_SUCCESS)
        return 2;
    if (buffers_register() || msptiActivityEnable(MSPTI_ACTIVITY_KIND_MARKER)
        || msptiActivityEnable(MSPTI_ACTIVITY_KIND_KERNEL))
        return 3;
    ScenarioWork *w = scenario_open();
    if (w == NULL) return 4;
    stream = scenario_stream(w);
    if (scenario_steps(w, steps) || scenario_close(w)) return 5;
    /* Unsubscribing delivers the records of the work the device has done; the flush hands
     * every buffer that holds one back. */
    msptiUnsubscribe(subscriber);
    msptiActivityFlushAll(1);
    buffers_walk(on_record);
    tally_print(&launches);
    tally_print(&host_marks);
    tally_print(&kernels);
    printf("device-marks %lu\n", device_marks);
    printf("foreign-userdata %lu\n", foreign_userdata);
    return 0;
}
