// The whole public API of seqgrad.
#pragma once

#include "seqgrad/core.h"
#include "seqgrad/nn.h"
