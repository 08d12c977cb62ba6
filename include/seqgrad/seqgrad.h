// The whole public API of seqgrad.
#pragma once

#include "seqgrad/core.h"
#if __has_include("seqgrad/nn.h")
#include "seqgrad/nn.h"
#endif
