// Neural-network building blocks: Module, layers, attention, LSTM, initialisation, optimizers,
// tracing, data-parallel training.
#pragma once

#include "seqgrad/nn/attention.h"
#include "seqgrad/nn/distributed.h"
#include "seqgrad/nn/init.h"
#include "seqgrad/nn/kv_cache.h"
#include "seqgrad/nn/layers.h"
#include "seqgrad/nn/lstm.h"
#include "seqgrad/nn/module.h"
#include "seqgrad/nn/optim.h"
#include "seqgrad/nn/positional.h"
#include "seqgrad/nn/trace.h"
