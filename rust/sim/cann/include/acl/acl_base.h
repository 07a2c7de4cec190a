/* The ACL base types and constants of CANN's acl/acl_base.h that the simulated CANN tree's
 * programs use, written from Huawei's public CANN API reference (AscendCL). Part of mspti-lens's
 * simulated CANN tree (docs/simulated_cann.md). */
#ifndef SIM_ACL_BASE_H_
#define SIM_ACL_BASE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ACL_FUNC_VISIBILITY __attribute__((visibility("default")))

typedef int aclError;
typedef void *aclrtStream;
typedef void *aclrtContext;
typedef void *aclrtEvent;
typedef void *aclrtFuncHandle;
typedef void *aclrtBinHandle;
typedef struct aclrtLaunchKernelCfg aclrtLaunchKernelCfg;
typedef struct aclrtPlaceHolderInfo aclrtPlaceHolderInfo;
typedef void *aclrtArgsHandle;

static const int ACL_SUCCESS = 0;
static const int ACL_ERROR_INVALID_PARAM = 100000;
static const int ACL_ERROR_UNINITIALIZE = 100001;
static const int ACL_ERROR_REPEAT_INITIALIZE = 100002;
static const int ACL_ERROR_BAD_ALLOC = 200000;
static const int ACL_ERROR_INTERNAL_ERROR = 500000;

typedef enum {
    ACL_DT_UNDEFINED = -1,
    ACL_FLOAT = 0,
    ACL_FLOAT16 = 1,
    ACL_INT8 = 2,
    ACL_INT32 = 3,
    ACL_UINT8 = 4,
    ACL_INT16 = 6,
    ACL_UINT16 = 7,
    ACL_UINT32 = 8,
    ACL_INT64 = 9,
    ACL_UINT64 = 10,
    ACL_DOUBLE = 11,
    ACL_BOOL = 12,
    ACL_BF16 = 27
} aclDataType;

typedef enum {
    ACL_FORMAT_UNDEFINED = -1,
    ACL_FORMAT_NCHW = 0,
    ACL_FORMAT_NHWC = 1,
    ACL_FORMAT_ND = 2,
    ACL_FORMAT_NC1HWC0 = 3,
    ACL_FORMAT_FRACTAL_Z = 4,
    ACL_FORMAT_FRACTAL_NZ = 29
} aclFormat;

#ifdef __cplusplus
}
#endif

#endif
