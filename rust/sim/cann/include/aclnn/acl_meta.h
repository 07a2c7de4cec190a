/* The aclnn tensor and scalar objects (aclnn/acl_meta.h, implemented by libnnopbase.so), with the
 * signatures of Huawei's public CANN API reference (aclnn common interfaces). Part of mspti-lens's
 * simulated CANN tree (docs/simulated_cann.md). */
#ifndef SIM_ACL_META_H_
#define SIM_ACL_META_H_

#include "acl/acl_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aclTensor aclTensor;
typedef struct aclScalar aclScalar;
typedef struct aclIntArray aclIntArray;
typedef int aclnnStatus;

ACL_FUNC_VISIBILITY aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                               const int64_t *stride, int64_t offset, aclFormat format,
                                               const int64_t *storageDims, uint64_t storageDimsNum,
                                               void *tensorData);
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyTensor(const aclTensor *tensor);
ACL_FUNC_VISIBILITY aclScalar *aclCreateScalar(void *value, aclDataType dataType);
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyScalar(const aclScalar *scalar);

#ifdef __cplusplus
}
#endif

#endif
