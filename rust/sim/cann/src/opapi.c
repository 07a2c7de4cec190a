/* The simulated libopapi.so: aclnn operators, two-phase as CANN's (GetWorkspaceSize, then the
 * call on a stream). Each computes its real result on the host (device memory is host memory in
 * the simulated tree), announces its kernel to the simulated device and launches it through the
 * public aclrtLaunchKernelWithHostArgs, as CANN's operators do, so a preloaded libmspti.so sees
 * the launch. The kernel and operator names are those CANN reports for the same operators (the
 * st checks of Huawei's MSPTI samples, test/mspti_cpp/st/script/test_mspti_samples.py). */
#include <stdlib.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_add.h"
#include "sim_hal.h"
#include "sim_tensor.h"

/* Device time of the Add kernel, ns. */
#define ADD_KERNEL_NS 3000

enum SimOp { SIM_OP_ADD = 1 };

struct aclOpExecutor {
    enum SimOp op;
    const aclTensor *self;
    const aclTensor *other;
    double alpha;
    aclTensor *out;
};

static double load(const aclTensor *t, int64_t i)
{
    const char *base = (const char *)t->data;
    switch (t->dataType) {
        case ACL_FLOAT: return ((const float *)base)[t->offset + i];
        case ACL_DOUBLE: return ((const double *)base)[t->offset + i];
        case ACL_INT32: return ((const int32_t *)base)[t->offset + i];
        case ACL_INT64: return (double)((const int64_t *)base)[t->offset + i];
        default: return 0.0;
    }
}

static void store(aclTensor *t, int64_t i, double v)
{
    char *base = (char *)t->data;
    switch (t->dataType) {
        case ACL_FLOAT: ((float *)base)[t->offset + i] = (float)v; break;
        case ACL_DOUBLE: ((double *)base)[t->offset + i] = v; break;
        case ACL_INT32: ((int32_t *)base)[t->offset + i] = (int32_t)v; break;
        case ACL_INT64: ((int64_t *)base)[t->offset + i] = (int64_t)v; break;
        default: break;
    }
}

aclnnStatus aclnnAddGetWorkspaceSize(const aclTensor *self, const aclTensor *other, const aclScalar *alpha,
                                     aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    if (self == NULL || other == NULL || alpha == NULL || out == NULL || workspaceSize == NULL || executor == NULL) {
        return ACL_ERROR_INVALID_PARAM;
    }
    if (simTensorNumel(self) != simTensorNumel(out) || simTensorNumel(other) != simTensorNumel(out)) {
        return ACL_ERROR_INVALID_PARAM;
    }
    aclOpExecutor *e = calloc(1, sizeof *e);
    if (e == NULL) {
        return ACL_ERROR_BAD_ALLOC;
    }
    e->op = SIM_OP_ADD;
    e->self = self;
    e->other = other;
    e->alpha = alpha->value;
    e->out = out;
    *workspaceSize = 0;
    *executor = e;
    msimHostWork(3000);
    return ACL_SUCCESS;
}

aclnnStatus aclnnAdd(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    (void)workspace;
    (void)workspaceSize;
    if (executor == NULL || executor->op != SIM_OP_ADD) {
        return ACL_ERROR_INVALID_PARAM;
    }
    int64_t n = simTensorNumel(executor->out);
    for (int64_t i = 0; i < n; i++) {
        store(executor->out, i, load(executor->self, i) + executor->alpha * load(executor->other, i));
    }
    /* CANN runs aclnnAdd with alpha != 1 as the Axpy kernel on the vector cores. */
    msimSetNextLaunch("Axpy_233851a3505389e43928a8bba133a74d_high_performance_210000000", "aclnnAdd_AxpyAiCore_Axpy",
                      ADD_KERNEL_NS, 1);
    aclError rc = aclrtLaunchKernelWithHostArgs(NULL, 1, stream, NULL, NULL, 0, NULL, 0);
    free(executor);
    return rc;
}
