// gpt2/train_parallel.h: training over several processes (doc/parallel.md), beside the
// single-process reference: each process's shard (tensor and pipeline parallelism) and AdamW part
// (ZeRO-1), the pipeline's schedule, the gradient sums and norm, checkpoints gathered from the
// parts. The trainers call these at a few points; one process alone takes the plain path.

#ifndef GPT2_TRAIN_PARALLEL_H
#define GPT2_TRAIN_PARALLEL_H

#include "model.h"
#include "parallel.h"
#include "run.h"

// ---------- a process's shard of the model ----------

// Stage pp_rank of pp, part tp_rank of tp. The L layers go to the stages in order, L / pp each,
// the first L mod pp stages one more: the last stage, which also computes the logits, gets fewer.
static inline Shard shard_of(GPT2Config c, int tp, int tp_rank, int pp, int pp_rank) {
    int L = c.num_layers, base = L / pp, extra = L % pp;
    Shard s;
    s.first_layer = pp_rank * base + (pp_rank < extra ? pp_rank : extra);
    s.num_layers = base + (pp_rank < extra ? 1 : 0);
    s.tp = tp;
    s.tp_rank = tp_rank;
    s.embed = pp_rank == 0;
    s.head = pp_rank == pp - 1;
    return s;
}

// One layer's slice of a (rows, cols) weight between the whole model (global) and a shard
// (local): split by rows (1; q, k, v are 3 blocks of rows), by columns (2) or whole (0).
// to_shard: 1 copies global into local, 0 back.
static inline void shard_copy_slice(float* local, float* global, size_t rows, size_t cols, int split,
                                    int blocks, Shard s, int to_shard) {
    size_t n_rows = split == 1 ? rows / blocks / s.tp : rows, n_cols = split == 2 ? cols / s.tp : cols;
    for (int b = 0; b < (split == 1 ? blocks : 1); b++) {
        for (size_t r = 0; r < n_rows; r++) {
            size_t g_row = split == 1 ? (size_t)b * (rows / blocks) + s.tp_rank * n_rows + r : r;
            float* g = global + g_row * cols + (split == 2 ? s.tp_rank * n_cols : 0);
            float* l = local + ((size_t)b * n_rows + r) * n_cols;
            if (to_shard) memcpy(l, g, n_cols * sizeof(float));
            else memcpy(g, l, n_cols * sizeof(float));
        }
    }
}

// Copies between a whole model's tensors and a shard's, either way (parameters, or AdamW's
// moments, laid out alike).
static inline void shard_copy(float* local, float* global, GPT2Config c, Shard s, int to_shard) {
    size_t gsizes[NUM_PARAMETER_TENSORS], glayer[NUM_PARAMETER_TENSORS];
    size_t lsizes[NUM_PARAMETER_TENSORS], llayer[NUM_PARAMETER_TENSORS];
    parameter_sizes(gsizes, glayer, c);
    shard_parameter_sizes(lsizes, llayer, c, s);
    size_t C = c.channels, goff = 0, loff = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        if (glayer[k] == 0 && lsizes[k] > 0) {  // wte, wpe, lnf: whole
            shard_copy_slice(local + loff, global + goff, 1, lsizes[k], 0, 1, s, to_shard);
        }
        for (int l = 0; l < s.num_layers && glayer[k] > 0; l++) {
            float* g = global + goff + (size_t)(s.first_layer + l) * glayer[k];
            float* lo = local + loff + (size_t)l * llayer[k];
            switch (k) {
                case QKVW: shard_copy_slice(lo, g, 3 * C, C, 1, 3, s, to_shard); break;
                case QKVB: shard_copy_slice(lo, g, 3 * C, 1, 1, 3, s, to_shard); break;
                case FCW: shard_copy_slice(lo, g, 4 * C, C, 1, 1, s, to_shard); break;
                case FCB: shard_copy_slice(lo, g, 4 * C, 1, 1, 1, s, to_shard); break;
                case ATTPROJW: shard_copy_slice(lo, g, C, C, 2, 1, s, to_shard); break;
                case FCPROJW: shard_copy_slice(lo, g, C, 4 * C, 2, 1, s, to_shard); break;
                default: shard_copy_slice(lo, g, 1, glayer[k], 0, 1, s, to_shard); break;
            }
        }
        goff += gsizes[k];
        loff += lsizes[k];
    }
}

// A shard of a whole host model, with its AdamW moments if it has them (under ZeRO-1, parts > 1,
// only those of part `part`, which this process updates).
static inline void gpt2_shard_from(GPT2* model, const GPT2* whole, Shard shard, int parts, int part) {
    gpt2_allocate_shard(model, whole->config, shard, parts);
    shard_copy(model->params_memory, whole->params_memory, whole->config, shard, 1);
    size_t part_size = model->num_padded / parts;
    model->opt_offset = (size_t)part * part_size;
    model->opt_count = part_size;
    if (whole->m_memory == NULL) return;
    float* moments = (float*)calloc_check(model->num_padded, sizeof(float));
    float* out[2] = {NULL, NULL};
    const float* in[2] = {whole->m_memory, whole->v_memory};
    for (int i = 0; i < 2; i++) {
        shard_copy(moments, (float*)in[i], whole->config, shard, 1);
        out[i] = (float*)malloc_check(part_size * sizeof(float));
        memcpy(out[i], moments + model->opt_offset, part_size * sizeof(float));
    }
    free(moments);
    model->m_memory = out[0];
    model->v_memory = out[1];
}

// The model this process trains, in host memory: the run's, or under -tp, -pp or -z its shard
// (then only rank 0 keeps the whole model, to gather checkpoints in). num_slots: the batches a
// pipeline stage holds between forward and backward: all M under GPipe, under 1F1B at most the
// stages from it to the last.
static inline GPT2* run_part(Run* run) {
    const TrainConfig* c = &run->cfg;
    run->split = split_is_model_parallel() || (c->zero && split.dp > 1);
    GPT2* model = &run->model;
    if (run->split) {
        Shard s = shard_of(run->model.config, split.tp, split.tp_rank, split.pp, split.pp_rank);
        int parts = c->zero ? split.dp : 1;
        gpt2_shard_from(&run->part, &run->model, s, parts, c->zero ? split.dp_rank : 0);
        if (procs.rank != 0) {  // keep only its shape
            GPT2Config config = run->model.config;
            gpt2_free(&run->model);
            run->model.config = config;
        }
        model = &run->part;
    }
    int M = run->micro_steps, ahead = split.pp - split.pp_rank;
    model->num_slots = split.pp == 1 ? 1 : split.gpipe || ahead > M ? M : ahead;
    return model;
}

// ---------- the pipeline's schedule ----------
// A step's micro-steps on this stage as a list of actions: passes, and exchanges (B x T x C)
// with the stage before (the input's gradient out, an input in) or after (an output out, its
// gradient in). 1F1B (Megatron-LM's): stage s of P runs P-1-s forward passes, then one forward
// and one backward in turn, then the backward passes left; GPipe every forward first. Each send
// is paired with the neighbour's receive at that moment, so no two stages wait to send.

enum { PIPE_FORWARD, PIPE_BACKWARD, PIPE_EXCHANGE };

typedef struct {
    int action;     // PIPE_...
    int micro;      // forward, backward: the micro-step
    int peer;       // exchange: -1 or +1
    int send, recv; // exchange: 1 where it sends, receives
    int slot;       // a pass's activations (micro % num_slots); an exchange's input or output
} PipeOp;

static inline int pipe_add(PipeOp* ops, int n, int action, int micro, int peer, int send, int recv, int slot) {
    PipeOp op = {action, micro, peer, send, recv, slot};
    ops[n] = op;
    return n + 1;
}

// An exchange with the stage before (send: the gradient of the input; recv_slot >= 0: an input)
// or after (send_slot >= 0: an output; recv: the gradient of an output): none at the ends.
static inline int pipe_with_prev(PipeOp* ops, int n, const GPT2* model, int send, int recv_slot) {
    if (model->shard.embed || (!send && recv_slot < 0)) return n;
    return pipe_add(ops, n, PIPE_EXCHANGE, -1, -1, send, recv_slot >= 0, recv_slot);
}
static inline int pipe_with_next(PipeOp* ops, int n, const GPT2* model, int send_slot, int recv) {
    if (model->shard.head || (send_slot < 0 && !recv)) return n;
    return pipe_add(ops, n, PIPE_EXCHANGE, -1, +1, send_slot >= 0, recv, send_slot);
}

// The schedule of a step of M micro-steps (at most 6M + 2 actions) into ops; returns their number.
static inline int pipe_schedule(PipeOp* ops, const GPT2* model, int M) {
    int ahead = split.pp - 1 - split.pp_rank, S = model->num_slots, n = 0;
    int warmup = split.gpipe || ahead > M ? M : ahead, rest = M - warmup;
    for (int i = 0; i < warmup; i++) {
        n = pipe_with_prev(ops, n, model, 0, i % S);
        n = pipe_add(ops, n, PIPE_FORWARD, i, 0, 0, 0, i % S);
        n = pipe_with_next(ops, n, model, i % S, 0);
    }
    if (rest > 0) n = pipe_with_prev(ops, n, model, 0, warmup % S);
    for (int i = 0; i < rest; i++) {  // one forward, one backward
        int f = warmup + i;
        n = pipe_add(ops, n, PIPE_FORWARD, f, 0, 0, 0, f % S);
        n = pipe_with_next(ops, n, model, f % S, 1);
        n = pipe_add(ops, n, PIPE_BACKWARD, i, 0, 0, 0, i % S);
        n = pipe_with_prev(ops, n, model, 1, i == rest - 1 ? -1 : (f + 1) % S);
    }
    for (int i = rest; i < M; i++) {  // the backward passes left
        n = pipe_with_next(ops, n, model, -1, 1);
        n = pipe_add(ops, n, PIPE_BACKWARD, i, 0, 0, 0, i % S);
        n = pipe_with_prev(ops, n, model, 1, -1);
    }
    return n;
}

// The input of slot `slot` from the stage before, the output of slot `slot` to the stage after:
// a forward pass through the pipeline (validation, samples); nothing at the ends.
static inline PipeOp pipe_input(const GPT2* model, int slot) {
    PipeOp op = {PIPE_EXCHANGE, -1, -1, 0, !model->shard.embed, slot};
    return op;
}
static inline PipeOp pipe_output(const GPT2* model, int slot) {
    PipeOp op = {PIPE_EXCHANGE, -1, +1, !model->shard.head, 0, slot};
    return op;
}

// The loss this process adds to the step's: the last stage's, once per tensor-parallel group.
static inline double stage_loss(const GPT2* model) {
    return model->shard.head && model->shard.tp_rank == 0 ? model->mean_loss : 0.0;
}

// ---------- the gradients ----------

// Whether tensor k's gradients count in the global norm here: a tensor that several processes
// of a replica hold whole (unsplit by -tp; wte on both pipeline ends) counts on the first only.
static inline int grad_counted_here(int k, const GPT2* model) {
    int split_by_tp = k == QKVW || k == QKVB || k == ATTPROJW || k == FCW || k == FCB || k == FCPROJW;
    if (!split_by_tp && model->shard.tp_rank != 0) return 0;
    if (k == WTE && model->shard.head && !model->shard.embed) return 0;
    return 1;
}

// The ranges of gradients counted here (under ZeRO-1 within this process's part), adjacent ones
// merged; returns their number (at most 16).
static inline int grad_norm_ranges(const GPT2* model, size_t* offset, size_t* count) {
    size_t lo = model->opt_offset, hi = model->opt_offset + model->opt_count, start = 0;
    int n = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        size_t a = start > lo ? start : lo, end = start + model->param_sizes[k], b = end < hi ? end : hi;
        start = end;
        if (a >= b || !grad_counted_here(k, model)) continue;
        if (n > 0 && offset[n - 1] + count[n - 1] == a) {
            count[n - 1] += b - a;
        } else {
            offset[n] = a;
            count[n++] = b - a;
        }
    }
    return n;
}

// The global norm from this process's sum of squares: summed over the processes that hold
// different parts (the whole model's; under ZeRO-1 every process's part), times grad_scale.
static inline float grad_norm_of(double squares, float grad_scale) {
    return (float)(grad_scale * sqrt(parallel_group_sum(split.zero ? GROUP_WORLD : GROUP_MODEL, squares)));
}

// ---------- sums over the processes, on host memory ----------

// -tp: a tensor summed over the tensor-parallel group, in place (the partial products of a
// process's heads or part of the MLP); nothing without -tp.
static inline void tp_sum_floats(float* x, size_t n) {
    if (split.tp > 1) parallel_group_sum_floats(GROUP_TP, x, n);
}

// The gradients summed where they belong: wte's two copies over the pipeline's ends, then all
// over the data-parallel replicas (under ZeRO-1 each gets its own part of the sum).
static inline void parallel_sum_gradients(GPT2* model) {
    if (split.pp > 1 && (model->shard.embed || model->shard.head)) {
        parallel_group_sum_floats(GROUP_EMBED, model->grads.wte, model->param_sizes[WTE]);
    }
    if (split.dp == 1) return;
    if (split.zero) parallel_reduce_scatter_floats(GROUP_DP, model->grads_memory, model->num_padded);
    else parallel_group_sum_floats(GROUP_DP, model->grads_memory, model->num_parameters);
}

// ZeRO-1, after each replica updated its part of the parameters: every part to every replica.
static inline void parallel_gather_params(GPT2* model) {
    if (split.zero && split.dp > 1) parallel_all_gather_floats(GROUP_DP, model->params_memory, model->num_padded);
}

// ---------- checkpoints of a split run ----------

// Every process's shard (parameters, AdamW moments) into rank 0's whole model. What ZeRO-1
// splits is first gathered within each data-parallel group; then the first replica's processes
// send their shards to rank 0. Every process calls it.
static inline void run_gather(Run* run) {
    GPT2* part = &run->part;
    size_t n = part->num_padded;
    float* moments[2] = {part->m_memory, part->v_memory};
    if (part->opt_count != part->num_parameters) {  // ZeRO-1: each holds a part of them
        parallel_gather_floats(GROUP_DP, part->params_memory, n);
        for (int i = 0; i < 2; i++) {
            float* whole = (float*)calloc_check(n, sizeof(float));
            memcpy(whole + part->opt_offset, moments[i], part->opt_count * sizeof(float));
            parallel_gather_floats(GROUP_DP, whole, n);
            moments[i] = whole;
        }
    }
    if (split.dp_rank == 0) {
        GPT2* host = &run->model;
        if (procs.rank == 0 && host->m_memory == NULL) {
            host->m_memory = (float*)calloc_check(host->num_parameters, sizeof(float));
            host->v_memory = (float*)calloc_check(host->num_parameters, sizeof(float));
        }
        for (int r = 0; r < split.tp * split.pp; r++) {  // the first replica's processes, in rank order
            Shard s = shard_of(part->config, split.tp, r % split.tp, split.pp, r / split.tp);
            size_t sizes[NUM_PARAMETER_TENSORS], layer[NUM_PARAMETER_TENSORS];
            shard_parameter_sizes(sizes, layer, part->config, s);
            size_t count = sum_sizes(sizes, NUM_PARAMETER_TENSORS);
            float* arrays[3] = {part->params_memory, moments[0], moments[1]};
            float* whole[3] = {host->params_memory, host->m_memory, host->v_memory};
            for (int i = 0; i < 3; i++) {
                if (procs.rank == 0) {
                    float* buf = arrays[i];
                    if (r != 0) {
                        buf = (float*)malloc_check(count * sizeof(float));
                        parallel_recv_floats(buf, count, r);
                    }
                    shard_copy(buf, whole[i], part->config, s, 0);
                    if (r != 0) free(buf);
                } else if (r == procs.rank) {
                    parallel_send_floats(arrays[i], count, 0);
                }
            }
        }
    }
    for (int i = 0; i < 2; i++) {
        if (moments[i] != part->m_memory && moments[i] != part->v_memory) free(moments[i]);
    }
}

// ---------- the memory of each part ----------

// Each process's part, printed by rank 0 after the first step: its layers and heads, the memory
// of its parameters, gradients, AdamW state and activations, and the bytes it sent, by group.
static inline void run_print_parts(const GPT2* model) {
    if (procs.size == 1) return;
    Shard s = model->shard;
    char line[256];
    double mb = 1e6;
    snprintf(line, sizeof(line),
             "rank %d (tp %d, pp %d, dp %d): layers %d-%d, heads %d/%d | params %.1f MB, grads %.1f MB, AdamW %.1f MB, "
             "activations %.1f MB (%d slot%s) | sent %.2f MB/step (tp %.2f, pp %.2f, dp %.2f, wte %.2f)",
             procs.rank, split.tp_rank, split.pp_rank, split.dp_rank, s.first_layer, s.first_layer + s.num_layers - 1,
             model->config.num_heads / s.tp, model->config.num_heads,
             (model->param_bytes > 0 ? model->param_bytes : model->num_parameters * 4.0) / mb,
             model->num_padded * 4.0 / mb,
             (model->optimizer_bytes > 0 ? model->optimizer_bytes : model->opt_count * 8.0) / mb,
             model->activation_bytes / mb,
             model->num_slots, model->num_slots > 1 ? "s" : "",
             (split.sent[GROUP_TP] + split.sent[GROUP_PP] + split.sent[GROUP_DP] + split.sent[GROUP_EMBED]) / mb,
             split.sent[GROUP_TP] / mb, split.sent[GROUP_PP] / mb, split.sent[GROUP_DP] / mb,
             split.sent[GROUP_EMBED] / mb);
    parallel_print_lines(line);
    fflush(stdout);
}

#endif // GPT2_TRAIN_PARALLEL_H
