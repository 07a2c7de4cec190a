/* Scenario 1 of the Callback API guide: the whole Runtime domain traced, each call's ENTER and
 * EXIT printed with its function name. Usage: domain_trace [STEPS] */
#include <stdio.h>
#include <stdlib.h>

#include "mspti.h"
#include "work.h"

static void on_call(void *userdata, msptiCallbackDomain domain, msptiCallbackId cbid,
                    const msptiCallbackData *cbdata)
{
    (void)userdata;
    (void)cbid;
    if (domain != MSPTI_CB_DOMAIN_RUNTIME) return;
    printf("%s %s\n", cbdata->callbackSite == MSPTI_API_ENTER ? "[ENTER]" : "[EXIT]", cbdata->functionName);
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
