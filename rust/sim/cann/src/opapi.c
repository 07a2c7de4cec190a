/* The simulated libopapi.so: aclnn operators, two-phase as CANN's (GetWorkspaceSize, then the
 * call on a stream). Each computes its real result on the host (device memory is host memory in
 * the simulated tree), announces its kernel to the simulated device and launches it through the
 * public aclrtLaunchKernelWithHostArgs, as CANN's operators do, so a preloaded libmspti.so sees
 * the launch. Kernel and operator names follow CANN's forms (<OpType>_<hash>_high_performance_<n>,
 * aclnn<Op>_<Impl>_<OpType>); Axpy's are the ones Huawei's st check of samples/mspti_activity
 * expects (test/mspti_cpp/st/script/test_mspti_samples.py), the others' hashes are made up. */
#include <stdlib.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_add.h"
#include "aclnnop/aclnn_matmul.h"
#include "sim_hal.h"
#include "sim_tensor.h"

/* Device time of the kernels, ns. */
#define ADD_KERNEL_NS 3000
#define MATMUL_KERNEL_NS 12000

enum SimOp { SIM_OP_ADD = 1, SIM_OP_MATMUL = 2 };

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
        case ACL_FLOAT16: return (double)((const _Float16 *)base)[t->offset + i];
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
        case ACL_FLOAT16: ((_Float16 *)base)[t->offset + i] = (_Float16)v; break;
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
    /* It reads its inputs after the stream's earlier work: copies queued there land first. */
    msimRunQueued(stream);
    int64_t n = simTensorNumel(executor->out);
    for (int64_t i = 0; i < n; i++) {
        store(executor->out, i, load(executor->self, i) + executor->alpha * load(executor->other, i));
    }
    /* CANN runs aclnnAdd with alpha != 1 as the Axpy kernel, with alpha 1 as Add (vector cores). */
    if (executor->alpha != 1.0) {
        msimSetNextLaunch("Axpy_233851a3505389e43928a8bba133a74d_high_performance_210000000",
                          "aclnnAdd_AxpyAiCore_Axpy", ADD_KERNEL_NS, 1);
    } else {
        msimSetNextLaunch("Add_2f3c0a5d8e9b41c7a6d1e0f4b3c2a1d0_high_performance_210000000", "aclnnAdd_AddAiCore_Add",
                          ADD_KERNEL_NS, 1);
    }
    aclError rc = aclrtLaunchKernelWithHostArgs(NULL, 1, stream, NULL, NULL, 0, NULL, 0);
    free(executor);
    return rc;
}

aclnnStatus aclnnMatmulGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out,
                                        int8_t cubeMathType, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    (void)cubeMathType;
    if (self == NULL || mat2 == NULL || out == NULL || workspaceSize == NULL || executor == NULL) {
        return ACL_ERROR_INVALID_PARAM;
    }
    if (self->dims != 2 || mat2->dims != 2 || out->dims != 2 || self->shape[1] != mat2->shape[0] ||
        out->shape[0] != self->shape[0] || out->shape[1] != mat2->shape[1]) {
        return ACL_ERROR_INVALID_PARAM;
    }
    aclOpExecutor *e = calloc(1, sizeof *e);
    if (e == NULL) {
        return ACL_ERROR_BAD_ALLOC;
    }
    e->op = SIM_OP_MATMUL;
    e->self = self;
    e->other = mat2;
    e->out = out;
    *workspaceSize = 0;
    *executor = e;
    msimHostWork(3000);
    return ACL_SUCCESS;
}

aclnnStatus aclnnMatmul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    (void)workspace;
    (void)workspaceSize;
    if (executor == NULL || executor->op != SIM_OP_MATMUL) {
        return ACL_ERROR_INVALID_PARAM;
    }
    /* It reads its inputs after the stream's earlier work: copies queued there land first. */
    msimRunQueued(stream);
    int64_t m = executor->self->shape[0], k = executor->self->shape[1], n = executor->other->shape[1];
    /* Converted once: element loads of half-precision data are slow in the inner loop. */
    double *a = malloc((size_t)(m * k) * sizeof(double));
    double *b = malloc((size_t)(k * n) * sizeof(double));
    if (a == NULL || b == NULL) {
        free(a);
        free(b);
        free(executor);
        return ACL_ERROR_BAD_ALLOC;
    }
    for (int64_t i = 0; i < m * k; i++) {
        a[i] = load(executor->self, i);
    }
    for (int64_t i = 0; i < k * n; i++) {
        b[i] = load(executor->other, i);
    }
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double acc = 0.0;
            for (int64_t x = 0; x < k; x++) {
                acc += a[i * k + x] * b[x * n + j];
            }
            store(executor->out, i * n + j, acc);
        }
    }
    free(a);
    free(b);
    /* A matrix multiply runs on the cube units (AI Core). */
    msimSetNextLaunch("MatMulV2_5d1f2c3b4a6e7d8c9b0a1f2e3d4c5b6a_high_performance_10000000",
                      "aclnnMatmul_MatMulCommon_MatMulV2", MATMUL_KERNEL_NS, 1);
    aclError rc = aclrtLaunchKernelWithHostArgs(NULL, 1, stream, NULL, NULL, 0, NULL, 0);
    free(executor);
    return rc;
}
