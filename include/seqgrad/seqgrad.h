// The whole public API of seqgrad, layer by layer: the engine (core), neural-network building
// blocks (nn), the sequence models (models) and training (training).
#pragma once

#include "seqgrad/core.h"
#include "seqgrad/models.h"
#include "seqgrad/nn.h"
#include "seqgrad/training.h"
