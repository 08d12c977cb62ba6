// The whole public API of seqgrad, layer by layer: the engine (core), neural-network building
// blocks (nn), the models and their searches (models), tokenizers and model files (text), training
// (training) and a trained model as a function from text to text (inference).
#pragma once

#include "seqgrad/core.h"
#include "seqgrad/inference.h"
#include "seqgrad/models.h"
#include "seqgrad/nn.h"
#include "seqgrad/text.h"
#include "seqgrad/training.h"
