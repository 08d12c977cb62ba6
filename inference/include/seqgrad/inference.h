// Inference: a trained model as a function from text to text (the Translator, the TextGenerator),
// or to labels (the TextClassifier) and guesses for masks (the MaskFiller).
#pragma once

#include "seqgrad/inference/text_classifier.h"
#include "seqgrad/inference/text_generator.h"
#include "seqgrad/inference/translator.h"
