// The engine: tensors, autograd, operations, gradcheck, memory and threads.
#pragma once

#include "seqgrad/core/allocator.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/cpu.h"
#include "seqgrad/core/error.h"
#include "seqgrad/core/files.h"
#include "seqgrad/core/gradcheck.h"
#include "seqgrad/core/hash.h"
#include "seqgrad/core/packed.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/core/precision.h"
#include "seqgrad/core/profile.h"
#include "seqgrad/core/random.h"
#include "seqgrad/core/safetensors.h"
#include "seqgrad/core/shape.h"
#include "seqgrad/core/tensor.h"
#include "seqgrad/core/threads.h"
