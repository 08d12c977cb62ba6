// The models: their config and registry, the decoder interface and the searches over it, the three
// sequence-to-sequence models, the summary and the PyTorch parity check.
#pragma once

#include "seqgrad/models/attn_seq2seq.h"
#include "seqgrad/models/common.h"
#include "seqgrad/models/ensemble.h"
#include "seqgrad/models/gpt.h"
#include "seqgrad/models/step_decoder.h"
#include "seqgrad/models/lstm_encoder.h"
#include "seqgrad/models/model.h"
#include "seqgrad/models/parity.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/models/search.h"
#include "seqgrad/models/seq2seq.h"
#include "seqgrad/models/summary.h"
#include "seqgrad/models/transformer.h"
