// Text: what a deployed program needs beside the model: tokenizers, vocabularies, UTF-8, the model
// files (a model with its tokenizers and vocabularies) and checkpoints decoding together.
#pragma once

#include "seqgrad/text/encoder_input.h"
#include "seqgrad/text/ensemble.h"
#include "seqgrad/text/model_file.h"
#include "seqgrad/text/tokenizer.h"
#include "seqgrad/text/utf8.h"
#include "seqgrad/text/vocabulary.h"
