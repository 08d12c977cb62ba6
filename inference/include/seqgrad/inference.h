// Inference: a trained model as a function from text to text (the Translator).
#pragma once

#include "seqgrad/inference/translator.h"
