// Inference: a trained model as a function from text to text (the Translator, the TextGenerator).
#pragma once

#include "seqgrad/inference/text_generator.h"
#include "seqgrad/inference/translator.h"
