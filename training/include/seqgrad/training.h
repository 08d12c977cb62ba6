// Training: tasks and their data, batching, options, a run's checkpoints, the training loop,
// evaluation and metrics.
#pragma once

#include "seqgrad/training/batching.h"
#include "seqgrad/training/bleu_chrf.h"
#include "seqgrad/training/checkpoint.h"
#include "seqgrad/training/classification_metrics.h"
#include "seqgrad/training/config_file.h"
#include "seqgrad/training/data.h"
#include "seqgrad/training/dataset.h"
#include "seqgrad/training/error_rates.h"
#include "seqgrad/training/evaluate.h"
#include "seqgrad/training/g2p.h"
#include "seqgrad/training/labelled.h"
#include "seqgrad/training/line_reader.h"
#include "seqgrad/training/options.h"
#include "seqgrad/training/pairs.h"
#include "seqgrad/training/recipe.h"
#include "seqgrad/training/synthetic.h"
#include "seqgrad/training/task.h"
#include "seqgrad/training/text_data.h"
#include "seqgrad/training/text_file.h"
#include "seqgrad/training/trainer.h"
