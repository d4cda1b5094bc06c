// gpt2/server.h: the engine (gpt2/engine.h) behind OpenAI's completions API over HTTP, for infer
// and infer_gpu's --serve (doc/serve.md): POST /v1/completions, streamed or not, GET /v1/models,
// GET /health.

// Threads: libmicrohttpd's, one per connection, reads and checks a body, queues its choices and
// waits for their text. The program's first thread owns the engine (its OpenMP threads built the
// model: a second pool would make libgomp spin and wake late, doc/serve.md); every step it drops
// abandoned sequences, admits waiting choices into free slots and runs one decode step. One lock
// (Server.lock) guards what they share; the engine runs without it.

// Bounds: the body (SERVER_MAX_BODY), the prompt, the choices, the queue (-q; beyond it HTTP 429),
// connections (-c), idle time (SERVER_IDLE_SECONDS), each request's time (-t). A waiting
// connection checks its socket every SERVER_POLL_MS: a client gone frees its slot at the next step.

#ifndef GPT2_SERVER_H
#define GPT2_SERVER_H

#include <microhttpd.h>
#include <pthread.h>
#include <poll.h>
#include <signal.h>
#include <netdb.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <time.h>
#include "completions.h"
#include "engine.h"

#define SERVER_MAX_BODY (1u << 20)     // bytes of a request's body
#define SERVER_IDLE_SECONDS 30         // a connection with nothing to do is closed after this
#define SERVER_POLL_MS 50              // how often a waiting request looks at its client
#define SERVER_DRAIN_SECONDS 10        // on SIGINT/SIGTERM, what requests in flight have to finish
#define SERVER_FAREWELL_SECONDS 1      // then, what their last events have to reach their clients

typedef struct {
    const char* address;   // --serve HOST:PORT (HOST defaults to 127.0.0.1; PORT 0: any free one)
    struct sockaddr_storage addr;  // that address, resolved (server_address)
    const char* model;     // the model's name, as /v1/models gives it and "model" must say
    GenParams defaults;    // what a request does not set (max_tokens: 16, as OpenAI's)
    int queue;             // -q: choices waiting for a slot, at most
    double time_limit;     // -t: seconds a request may take, from its arrival to its last token
    int connections;       // -c: open connections, at most
} ServerOptions;

typedef struct ServerCall ServerCall;

enum { CHOICE_WAITING, CHOICE_RUNNING, CHOICE_DONE };

// One choice: a prompt to continue once. The engine's thread writes state (past WAITING), text,
// completion_tokens and finish_reason; the call's thread everything else; both under the lock.
typedef struct ServerChoice {
    Request req;            // the engine's request (req.user: this choice), until it takes it
    int* ids;               // the prompt's tokens, until the engine takes them
    int P;
    int index;              // in the answer's choices
    ServerCall* call;
    int state;
    int cancel;             // the call has given up on it: the engine drops it at its next step
    unsigned char* text;    // generated so far
    size_t text_len, text_cap;
    size_t* ends;           // (num_tokens) the text's length after each token, where events end
    int num_tokens, tokens_cap;
    size_t sent;            // bytes of text streamed
    int streamed;           // tokens streamed (their events sent)
    int completion_tokens;
    const char* finish_reason;  // once done: "stop" or "length"; NULL: cut short
    int ended;              // its last event is streamed
    struct ServerChoice *prev, *next;  // in the queue, while waiting
} ServerChoice;

typedef struct {
    Engine* engine;
    ServerOptions opt;
    struct MHD_Daemon* daemon;
    pthread_t signal_thread;  // waits for SIGINT or SIGTERM (the engine's is the caller's)
    pthread_mutex_t lock;
    pthread_cond_t work;    // the engine thread waits on it for choices, cancels or the end
    ServerChoice *head, *tail;  // the queue: choices waiting for a slot, first come first served
    int waiting;            // in the queue
    int running;            // taken by the engine thread, not yet done
    int calls;              // requests being answered
    int stopping;           // SIGINT or SIGTERM came: no new requests
    double drain_end;       // when requests still in flight are cut short
    int quit;               // the engine thread ends
    long requests, failed;  // answered, and of them with an error
    uint64_t next_id;       // of the answers' ids
    uint64_t next_seed;     // of the seeds of requests without one
    long created;           // when the server started (Unix time), the model's "created"
    int* cancels;           // (slots) the engine thread's
    int pages_in_use, pages_peak, active;  // the engine's, published after every step
} Server;

struct ServerCall {
    Server* srv;
    Completion body;        // the request as read (its stop strings serve the streaming)
    ServerChoice* choices;
    int num_choices;
    int prompt_tokens;
    pthread_cond_t changed; // a choice has news
    double deadline;        // now_seconds() past which the request is cut short
    int fd;                 // the client's socket
    double checked;         // when it was last looked at
    char id[32];
    long created;
    // streaming: the events made and not yet handed to libmicrohttpd
    char* out;
    size_t out_len, out_pos;
    int ended;
};

// ---------- writing JSON into memory ----------

typedef struct {
    FILE* f;
    char* buf;
    size_t len;
} MemText;

static inline void memtext_open(MemText* t) {
    t->buf = NULL;
    t->len = 0;
    t->f = open_memstream(&t->buf, &t->len);
    if (t->f == NULL) fail("server: out of memory");
}

// Closes t; its text (malloc'd) is t->buf, t->len bytes.
static inline void memtext_close(MemText* t) {
    if (ferror(t->f)) fail("server: out of memory");
    fclose(t->f);
    t->f = NULL;
}

static inline void json_write_cstring(FILE* f, const char* s) {
    json_write_string(f, (const unsigned char*)s, strlen(s));
}

// ---------- answers ----------

static enum MHD_Result server_send(struct MHD_Connection* conn, unsigned status, MemText* t) {
    memtext_close(t);
    struct MHD_Response* r = MHD_create_response_from_buffer(t->len, t->buf, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        free(t->buf);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

// OpenAI's error object: {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}.
static enum MHD_Result server_error(struct MHD_Connection* conn, unsigned status, const char* param,
                                    const char* code, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
static enum MHD_Result server_error(struct MHD_Connection* conn, unsigned status, const char* param,
                                    const char* code, const char* fmt, ...) {
    char message[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof(message), fmt, args);
    va_end(args);
    const char* type = status == 429 ? "rate_limit_error" : status >= 500 ? "server_error" : "invalid_request_error";
    MemText t;
    memtext_open(&t);
    fputs("{\"error\": {\"message\": ", t.f);
    json_write_cstring(t.f, message);
    fputs(", \"type\": ", t.f);
    json_write_cstring(t.f, type);
    fputs(", \"param\": ", t.f);
    if (param != NULL) json_write_cstring(t.f, param);
    else fputs("null", t.f);
    fputs(", \"code\": ", t.f);
    if (code != NULL) json_write_cstring(t.f, code);
    else fputs("null", t.f);
    fputs("}}\n", t.f);
    return server_send(conn, status, &t);
}

static void server_write_model(const Server* s, FILE* f) {
    fputs("{\"id\": ", f);
    json_write_cstring(f, s->opt.model);
    fprintf(f, ", \"object\": \"model\", \"created\": %ld, \"owned_by\": \"local\"}", s->created);
}

// ---------- the engine's thread: the program's first ----------

// The engine's callbacks, on its thread: a choice's token, and its end.
static void server_on_token(void* user, const Request* req, int token) {
    Server* s = (Server*)user;
    ServerChoice* ch = (ServerChoice*)req->user;
    size_t n;
    const unsigned char* bytes = tokenizer_decode(s->engine->tok, (uint32_t)token, &n);
    pthread_mutex_lock(&s->lock);
    if (bytes != NULL && n > 0) {
        if (ch->text_len + n > ch->text_cap) {
            ch->text_cap = 2 * (ch->text_len + n) + 64;
            ch->text = (unsigned char*)realloc_check(ch->text, ch->text_cap);
        }
        memcpy(ch->text + ch->text_len, bytes, n);
        ch->text_len += n;
    }
    if (ch->num_tokens == ch->tokens_cap) {
        ch->tokens_cap = 2 * ch->tokens_cap + 16;
        ch->ends = (size_t*)realloc_check(ch->ends, (size_t)ch->tokens_cap * sizeof(size_t));
    }
    ch->ends[ch->num_tokens++] = ch->text_len;
    ch->completion_tokens++;
    pthread_cond_broadcast(&ch->call->changed);
    pthread_mutex_unlock(&s->lock);
}

static void server_on_result(void* user, const EngineResult* r) {
    Server* s = (Server*)user;
    ServerChoice* ch = (ServerChoice*)r->req.user;
    pthread_mutex_lock(&s->lock);
    // the engine's text is the one that counts: a stop string is cut from it
    if (r->text_len > ch->text_cap) {
        ch->text_cap = r->text_len;
        ch->text = (unsigned char*)realloc_check(ch->text, ch->text_cap);
    }
    if (r->text_len > 0) memcpy(ch->text, r->text, r->text_len);
    ch->text_len = r->text_len;
    ch->completion_tokens = r->completion_tokens;
    ch->finish_reason = strcmp(r->finish_reason, "cancelled") == 0 ? NULL : r->finish_reason;
    ch->state = CHOICE_DONE;
    s->running--;
    pthread_cond_broadcast(&ch->call->changed);
    pthread_mutex_unlock(&s->lock);
}

static void server_queue_remove(Server* s, ServerChoice* ch) {
    if (ch->prev != NULL) ch->prev->next = ch->next;
    else s->head = ch->next;
    if (ch->next != NULL) ch->next->prev = ch->prev;
    else s->tail = ch->prev;
    ch->prev = ch->next = NULL;
    s->waiting--;
}

// A choice that never reached a slot is done (lock held): it frees what it would have handed on.
static void server_choice_drop(ServerChoice* ch) {
    request_free(&ch->req);
    free(ch->ids);
    ch->ids = NULL;
    ch->state = CHOICE_DONE;
    ch->finish_reason = NULL;
}

// The engine's loop, in the thread that built the model: cancels, admissions in the queue's
// order (each prompt's prefill run here), then one decode step; until the signal thread says quit.
static void server_engine_loop(Server* s) {
    Engine* e = s->engine;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->quit && e->active == 0 && s->head == NULL) pthread_cond_wait(&s->work, &s->lock);
        if (s->quit && e->active == 0) break;
        // the sequences whose call has given up
        int n = 0;
        for (int i = 0; i < e->slots; i++) {
            if (e->seq[i].req.prompt != NULL && ((ServerChoice*)e->seq[i].req.user)->cancel) s->cancels[n++] = i;
        }
        pthread_mutex_unlock(&s->lock);
        for (int k = 0; k < n; k++) engine_cancel(e, s->cancels[k]);
        // admissions, in the queue's order, while there are free slots and the pool can promise
        pthread_mutex_lock(&s->lock);
        while (s->head != NULL && e->active < e->slots) {
            ServerChoice* ch = s->head;
            server_queue_remove(s, ch);
            ch->state = CHOICE_RUNNING;
            s->running++;
            // the engine takes the tokens; a choice done at its first token (max_tokens 1, a stop
            // string) may be freed by its call before the lock comes back: ch is not touched then
            int* ids = ch->ids;
            ch->ids = NULL;
            pthread_mutex_unlock(&s->lock);
            EnginePass pass;
            int admitted = engine_admit(e, &ch->req, ids, ch->P, &pass);
            if (admitted) {  // the prefill, and the first token: it may finish the choice
                double t0 = now_seconds();
                e->device.forward(e->device.ctx, &pass, e->logits);
                engine_admitted(e, now_seconds() - t0);
                free(ids);
            }
            pthread_mutex_lock(&s->lock);
            if (admitted) continue;
            ch->ids = ids;
            s->running--;
            if (ch->cancel) {  // given up on while it was tried
                server_choice_drop(ch);
                pthread_cond_broadcast(&ch->call->changed);
                continue;
            }
            ch->state = CHOICE_WAITING;  // back to the head of the queue, for pages to come back
            ch->next = s->head;
            if (s->head != NULL) s->head->prev = ch;
            else s->tail = ch;
            s->head = ch;
            s->waiting++;
            break;
        }
        pthread_mutex_unlock(&s->lock);
        EnginePass pass = engine_decode_pass(e);
        if (pass.B > 0) {  // one token of every active sequence
            double t0 = now_seconds();
            e->device.forward(e->device.ctx, &pass, e->logits);
            engine_decoded(e, pass.B, now_seconds() - t0);
        }
        pthread_mutex_lock(&s->lock);
        s->pages_in_use = e->pool.in_use;
        s->pages_peak = e->pool.peak;
        s->active = e->active;
    }
    pthread_mutex_unlock(&s->lock);
}

// ---------- a request's thread: waiting for its choices ----------

enum { WAIT_NEWS, WAIT_GONE, WAIT_TIMEOUT, WAIT_STOPPING };

// Whether the client has closed its end: it cannot take an answer any more.
static int server_client_gone(int fd) {
    struct pollfd p;
    p.fd = fd;
    p.events = POLLIN;
    p.revents = 0;
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return 1;
    char byte;
    return recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;  // end of its stream
}

// Waits (lock held) until one of the call's choices has news or SERVER_POLL_MS pass; then says
// whether to go on, or why not.
static int server_wait(Server* s, ServerCall* c) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += SERVER_POLL_MS * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&c->changed, &s->lock, &until);
    double now = now_seconds();
    if (now - c->checked >= SERVER_POLL_MS * 1e-3) {  // not at every token: a system call or two
        c->checked = now;
        pthread_mutex_unlock(&s->lock);
        int gone = server_client_gone(c->fd);
        pthread_mutex_lock(&s->lock);
        if (gone) return WAIT_GONE;
    }
    if (now > c->deadline) return WAIT_TIMEOUT;
    if (s->stopping) {
        if (now > s->drain_end) return WAIT_STOPPING;
        for (int i = 0; i < c->num_choices; i++) {  // not started: it will not be
            if (c->choices[i].state == CHOICE_WAITING) return WAIT_STOPPING;
        }
    }
    return WAIT_NEWS;
}

static int server_call_done(const ServerCall* c) {
    for (int i = 0; i < c->num_choices; i++) {
        if (c->choices[i].state != CHOICE_DONE) return 0;
    }
    return 1;
}

// Gives up on the call's choices (lock held): the waiting leave the queue, the running are
// dropped by the engine at its next step; returns when none is left in the engine.
static void server_call_cancel(Server* s, ServerCall* c) {
    for (int i = 0; i < c->num_choices; i++) {
        ServerChoice* ch = &c->choices[i];
        if (ch->state == CHOICE_WAITING) {
            server_queue_remove(s, ch);
            server_choice_drop(ch);
        } else if (ch->state == CHOICE_RUNNING) {
            ch->cancel = 1;
        }
    }
    pthread_cond_signal(&s->work);
    while (!server_call_done(c)) pthread_cond_wait(&c->changed, &s->lock);
}

static void server_call_free(ServerCall* c) {
    Server* s = c->srv;
    for (int i = 0; i < c->num_choices; i++) {
        free(c->choices[i].text);
        free(c->choices[i].ends);
        request_free(&c->choices[i].req);
        free(c->choices[i].ids);
    }
    free(c->choices);
    completion_free(&c->body);
    free(c->out);
    pthread_cond_destroy(&c->changed);
    free(c);
    pthread_mutex_lock(&s->lock);
    s->calls--;
    pthread_mutex_unlock(&s->lock);
}

static const char* server_wait_message(const Server* s, int why, char* buf, size_t cap) {
    if (why == WAIT_TIMEOUT) {
        snprintf(buf, cap, "the request took longer than this server allows (%g s, -t)", s->opt.time_limit);
    } else {
        snprintf(buf, cap, "the server is shutting down");
    }
    return buf;
}

// ---------- answers: all at once ----------

static void server_write_usage(const ServerCall* c, FILE* f) {
    int completion = 0;
    for (int i = 0; i < c->num_choices; i++) completion += c->choices[i].completion_tokens;
    fprintf(f, "{\"prompt_tokens\": %d, \"completion_tokens\": %d, \"total_tokens\": %d}", c->prompt_tokens,
            completion, c->prompt_tokens + completion);
}

// The head every answer and event starts with.
static void server_write_head(const ServerCall* c, FILE* f) {
    fprintf(f, "{\"id\": \"%s\", \"object\": \"text_completion\", \"created\": %ld, \"model\": ", c->id, c->created);
    json_write_cstring(f, c->srv->opt.model);
}

static void server_write_choice(FILE* f, int index, const unsigned char* text, size_t n, const char* finish_reason) {
    fputs("{\"text\": ", f);
    json_write_string(f, text, n);
    fprintf(f, ", \"index\": %d, \"logprobs\": null, \"finish_reason\": ", index);
    if (finish_reason != NULL) json_write_cstring(f, finish_reason);
    else fputs("null", f);
    fputc('}', f);
}

static enum MHD_Result server_answer(struct MHD_Connection* conn, ServerCall* c) {
    Server* s = c->srv;
    pthread_mutex_lock(&s->lock);
    int why = WAIT_NEWS;
    while (!server_call_done(c) && (why = server_wait(s, c)) == WAIT_NEWS) {}
    if (why != WAIT_NEWS) server_call_cancel(s, c);
    pthread_mutex_unlock(&s->lock);
    enum MHD_Result ret;
    if (why == WAIT_GONE) {
        ret = MHD_NO;  // nobody to answer: the connection closes
    } else if (why != WAIT_NEWS) {
        char message[128];
        ret = server_error(conn, 503, NULL, why == WAIT_TIMEOUT ? "timeout" : "shutting_down", "%s",
                           server_wait_message(s, why, message, sizeof(message)));
    } else {
        MemText t;
        memtext_open(&t);
        server_write_head(c, t.f);
        fputs(", \"choices\": [", t.f);
        for (int i = 0; i < c->num_choices; i++) {
            ServerChoice* ch = &c->choices[i];
            if (i > 0) fputs(", ", t.f);
            server_write_choice(t.f, i, ch->text, ch->text_len, ch->finish_reason);
        }
        fputs("], \"usage\": ", t.f);
        server_write_usage(c, t.f);
        fputs("}\n", t.f);
        ret = server_send(conn, 200, &t);
    }
    pthread_mutex_lock(&s->lock);
    s->requests++;
    if (why != WAIT_NEWS) s->failed++;
    pthread_mutex_unlock(&s->lock);
    server_call_free(c);
    return ret;
}

// ---------- answers: streamed as server-sent events ----------

// The bytes at the end of text[0, end) that begin a character and could still be finished by the
// bytes to come: an invalid sequence as the JSON writer counts them (utf8_invalid_length, one
// U+FFFD each) that runs into the end. An event that ended there would replace them with U+FFFD
// where the whole text has a character.
static size_t server_unfinished(const unsigned char* text, size_t end) {
    for (size_t back = 1; back <= 3 && back <= end; back++) {
        const unsigned char* s = text + end - back;
        uint32_t cp;
        int lead = *s >= 0xC2 && *s <= 0xF4;  // a byte that begins a character of 2 to 4 bytes
        if (lead && utf8_decode(s, back, &cp) == 0 && (size_t)utf8_invalid_length(s, back) == back) return back;
    }
    return 0;
}

// How much of a running choice's text may be streamed now: not the bytes of a character still
// arriving (each event is valid UTF-8 on its own, and together they are the whole text), nor
// what could be the start of a stop string (the completion ends before a stop string, and text
// streamed cannot be taken back).
static size_t server_stream_end(const ServerCall* c, const ServerChoice* ch) {
    size_t end = ch->text_len, hold = server_unfinished(ch->text, end);
    const Request* q = &c->body.req;
    for (int k = 0; k < q->num_stop; k++) {
        size_t m = q->stop_len[k] - 1 < end ? q->stop_len[k] - 1 : end;
        for (; m > hold; m--) {
            if (memcmp(ch->text + end - m, q->stop[k], m) == 0) {
                hold = m;
                break;
            }
        }
    }
    return end - hold;
}

static void server_write_event_end(FILE* f) {
    fputs("\n\n", f);
}

static void server_write_event(ServerCall* c, FILE* f, ServerChoice* ch, size_t end, const char* finish_reason) {
    fputs("data: ", f);
    server_write_head(c, f);
    fputs(", \"choices\": [", f);
    server_write_choice(f, ch->index, ch->text + ch->sent, end - ch->sent, finish_reason);
    fputs("]", f);
    if (c->body.include_usage) fputs(", \"usage\": null", f);
    fputc('}', f);
    server_write_event_end(f);
    ch->sent = end;
}

// The events for what the call's choices have that was not streamed yet (lock held): one per
// token, a token's text joining the next one's while it may not be sent yet (server_stream_end),
// and a last one with the finish_reason and whatever text is left. Returns whether every choice
// has had its last event.
static int server_stream_events(ServerCall* c, FILE* f) {
    int ended = 1;
    for (int i = 0; i < c->num_choices; i++) {
        ServerChoice* ch = &c->choices[i];
        if (ch->ended) continue;
        int done = ch->state == CHOICE_DONE;  // then its text is final, a stop string cut from it
        size_t end = done ? ch->text_len : server_stream_end(c, ch);
        for (; ch->streamed < ch->num_tokens && ch->ends[ch->streamed] <= end; ch->streamed++) {
            size_t e = ch->ends[ch->streamed];
            if (e > ch->sent && server_unfinished(ch->text, e) == 0) server_write_event(c, f, ch, e, NULL);
        }
        if (done) {
            server_write_event(c, f, ch, ch->text_len, ch->finish_reason);
            ch->ended = 1;
        } else {
            ended = 0;
        }
    }
    return ended;
}

static ssize_t server_stream_read(void* cls, uint64_t pos, char* buf, size_t max) {
    (void)pos;
    ServerCall* c = (ServerCall*)cls;
    Server* s = c->srv;
    if (c->out_pos == c->out_len) {
        if (c->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        free(c->out);
        MemText t;
        memtext_open(&t);
        pthread_mutex_lock(&s->lock);
        for (;;) {
            int all = server_stream_events(c, t.f);
            if (all) {
                if (c->body.include_usage) {
                    fputs("data: ", t.f);
                    server_write_head(c, t.f);
                    fputs(", \"choices\": [], \"usage\": ", t.f);
                    server_write_usage(c, t.f);
                    fputc('}', t.f);
                    server_write_event_end(t.f);
                }
                fputs("data: [DONE]", t.f);
                server_write_event_end(t.f);
                c->ended = 1;
                s->requests++;
                break;
            }
            if (ftell(t.f) > 0) break;
            int why = server_wait(s, c);
            if (why == WAIT_NEWS) continue;
            server_call_cancel(s, c);
            s->requests++;
            s->failed++;
            if (why == WAIT_GONE) {
                pthread_mutex_unlock(&s->lock);
                memtext_close(&t);
                c->out = t.buf;
                c->out_len = c->out_pos = 0;
                c->ended = 1;
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            char message[128];  // the answer has begun with 200: the error is an event
            fputs("data: {\"error\": {\"message\": ", t.f);
            json_write_cstring(t.f, server_wait_message(s, why, message, sizeof(message)));
            fprintf(t.f, ", \"type\": \"server_error\", \"param\": null, \"code\": \"%s\"}}",
                    why == WAIT_TIMEOUT ? "timeout" : "shutting_down");
            server_write_event_end(t.f);
            fputs("data: [DONE]", t.f);
            server_write_event_end(t.f);
            c->ended = 1;
            break;
        }
        pthread_mutex_unlock(&s->lock);
        memtext_close(&t);
        c->out = t.buf;
        c->out_len = t.len;
        c->out_pos = 0;
    }
    size_t n = c->out_len - c->out_pos < max ? c->out_len - c->out_pos : max;
    memcpy(buf, c->out + c->out_pos, n);
    c->out_pos += n;
    return (ssize_t)n;
}

// The stream's end, whatever it was (libmicrohttpd calls it once the connection is done with it).
static void server_stream_free(void* cls) {
    ServerCall* c = (ServerCall*)cls;
    Server* s = c->srv;
    pthread_mutex_lock(&s->lock);
    if (!c->ended) {  // the connection closed under it
        s->requests++;
        s->failed++;
    }
    server_call_cancel(s, c);
    pthread_mutex_unlock(&s->lock);
    server_call_free(c);
}

// ---------- POST /v1/completions ----------

// The seed of a request that gives none: a different one each time (splitmix64 of a counter).
static uint64_t server_fresh_seed(Server* s) {
    uint64_t z = (s->next_seed++ + (uint64_t)s->created) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (z ^ (z >> 31)) & (((uint64_t)1 << 53) - 1);
}

// A request answered with an error before it reached the queue: counted, and its call freed.
static enum MHD_Result server_refuse(ServerCall* c, enum MHD_Result sent) {
    Server* s = c->srv;
    pthread_mutex_lock(&s->lock);
    s->requests++;
    s->failed++;
    pthread_mutex_unlock(&s->lock);
    server_call_free(c);
    return sent;
}

static enum MHD_Result server_completions(Server* s, struct MHD_Connection* conn, const char* body, size_t n) {
    Engine* e = s->engine;
    ServerCall* c = (ServerCall*)calloc_check(1, sizeof(ServerCall));
    c->srv = s;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&c->changed, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_lock(&s->lock);
    s->calls++;
    pthread_mutex_unlock(&s->lock);
    Completion* b = &c->body;
    if (!completion_parse(b, body, n, &s->opt.defaults)) {
        return server_refuse(c, server_error(conn, 400, b->req.error_field, NULL, "%s", b->req.error));
    }
    if (b->model != NULL && strcmp(b->model, s->opt.model) != 0) {
        return server_refuse(c, server_error(conn, 404, "model", "model_not_found", "the model '%.200s' is not "
                                             "served here; this server has '%s' (GET /v1/models)", b->model,
                                             s->opt.model));
    }
    int total = b->num_prompts * b->n;
    if (total > e->slots + s->opt.queue) {
        return server_refuse(c, server_error(conn, 400, "n", NULL, "this request asks for %d choices (prompts "
                                             "times n); the server runs %d at once and queues %d (-b, -q)", total,
                                             e->slots, s->opt.queue));
    }
    // the choices, each with its prompt's tokens, checked against the context
    c->choices = (ServerChoice*)calloc_check((size_t)total, sizeof(ServerChoice));
    for (int p = 0; p < b->num_prompts; p++) {
        Request q = b->req;
        q.prompt = b->prompts[p];
        q.prompt_len = b->prompt_lens[p];
        size_t P;
        int* ids = engine_encode(e, &q, &P);
        if (!engine_fits_context(e, &q, P)) {
            free(ids);
            const char* param = P >= (size_t)e->config->max_seq_len ? "prompt" : "max_tokens";
            return server_refuse(c, server_error(conn, 400, param, NULL, "%s%s", b->num_prompts > 1 ? "a prompt: " : "",
                                                 q.error));
        }
        c->prompt_tokens += (int)P;
        for (int j = 0; j < b->n; j++) {
            ServerChoice* ch = &c->choices[c->num_choices];
            ch->index = c->num_choices++;
            ch->call = c;
            ch->P = (int)P;
            ch->ids = j == b->n - 1 ? ids : (int*)malloc_check(P * sizeof(int));
            if (ch->ids != ids) memcpy(ch->ids, ids, P * sizeof(int));
            ch->req = b->req;
            ch->req.prompt = (char*)malloc_check(q.prompt_len + 1);  // the engine's "this slot is taken"
            memcpy(ch->req.prompt, q.prompt, q.prompt_len + 1);
            ch->req.prompt_len = q.prompt_len;
            for (int k = 0; k < b->req.num_stop; k++) {
                ch->req.stop[k] = (char*)malloc_check(b->req.stop_len[k] + 1);
                memcpy(ch->req.stop[k], b->req.stop[k], b->req.stop_len[k] + 1);
            }
            ch->req.user = ch;
            ch->req.id = ch->index;
        }
    }
    c->fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD)->connect_fd;
    c->created = (long)time(NULL);
    c->deadline = now_seconds() + s->opt.time_limit;
    // into the queue, or 429 when it is full
    pthread_mutex_lock(&s->lock);
    // room for slots + queue choices: those running, and those waiting for a slot
    int refused = s->stopping ? 503 : s->running + s->waiting + total > e->slots + s->opt.queue ? 429 : 0;
    if (!refused) {
        uint64_t base = b->seed_given ? b->req.params.seed : 0;
        for (int i = 0; i < total; i++) {
            ServerChoice* ch = &c->choices[i];
            ch->req.params.seed = b->seed_given ? base + (uint64_t)i : server_fresh_seed(s);
            ch->state = CHOICE_WAITING;
            ch->prev = s->tail;
            if (s->tail != NULL) s->tail->next = ch;
            else s->head = ch;
            s->tail = ch;
            s->waiting++;
        }
        snprintf(c->id, sizeof(c->id), "cmpl-%llx", (unsigned long long)s->next_id++);
        pthread_cond_signal(&s->work);
    } else {
        for (int i = 0; i < total; i++) c->choices[i].state = CHOICE_DONE;
    }
    int waiting = s->waiting;
    pthread_mutex_unlock(&s->lock);
    if (refused == 503) {
        return server_refuse(c, server_error(conn, 503, NULL, "shutting_down", "the server is shutting down"));
    }
    if (refused == 429) {
        return server_refuse(c, server_error(conn, 429, NULL, "queue_full", "the server is busy: %d choices are "
                                             "waiting for a slot, at most %d may (-q); try again later", waiting,
                                             s->opt.queue));
    }
    if (!b->stream) return server_answer(conn, c);
    struct MHD_Response* r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, server_stream_read, c,
                                                               server_stream_free);
    if (r == NULL) {
        server_stream_free(c);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ret = MHD_queue_response(conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

// ---------- GET /v1/models, GET /health ----------

static enum MHD_Result server_models(Server* s, struct MHD_Connection* conn, const char* url) {
    MemText t;
    memtext_open(&t);
    if (strcmp(url, "/v1/models") == 0) {
        fputs("{\"object\": \"list\", \"data\": [", t.f);
        server_write_model(s, t.f);
        fputs("]}\n", t.f);
        return server_send(conn, 200, &t);
    }
    const char* name = url + strlen("/v1/models/");
    if (strcmp(name, s->opt.model) != 0) {
        memtext_close(&t);
        free(t.buf);
        return server_error(conn, 404, "model", "model_not_found", "the model '%.200s' is not served here; this "
                            "server has '%s'", name, s->opt.model);
    }
    server_write_model(s, t.f);
    fputc('\n', t.f);
    return server_send(conn, 200, &t);
}

static enum MHD_Result server_health(Server* s, struct MHD_Connection* conn) {
    MemText t;
    memtext_open(&t);
    pthread_mutex_lock(&s->lock);
    const union MHD_DaemonInfo* info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    fprintf(t.f, "{\"status\": \"%s\", \"model\": ", s->stopping ? "stopping" : "ok");
    json_write_cstring(t.f, s->opt.model);
    fprintf(t.f, ", \"slots\": %d, \"active\": %d, \"waiting\": %d, \"queue\": %d, \"requests\": %ld, "
            "\"failed\": %ld, \"connections\": %u, \"kv_pages\": %d, \"kv_pages_in_use\": %d, "
            "\"kv_pages_peak\": %d}\n", s->engine->slots, s->active, s->waiting, s->opt.queue, s->requests, s->failed,
            info != NULL ? info->num_connections : 0u, s->engine->pool.num_pages, s->pages_in_use, s->pages_peak);
    int stopping = s->stopping;
    pthread_mutex_unlock(&s->lock);
    return server_send(conn, stopping ? 503 : 200, &t);
}

// ---------- routing ----------

typedef struct {
    char* body;
    size_t len, cap;
    int too_big;
} ServerUpload;

static enum MHD_Result server_route(void* cls, struct MHD_Connection* conn, const char* url, const char* method,
                                    const char* version, const char* upload_data, size_t* upload_data_size,
                                    void** con_cls) {
    (void)version;
    Server* s = (Server*)cls;
    ServerUpload* up = (ServerUpload*)*con_cls;
    if (up == NULL) {  // the headers: a body announced too big is refused before it comes
        up = (ServerUpload*)calloc_check(1, sizeof(ServerUpload));
        *con_cls = up;
        const char* length = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (length != NULL && strtoull(length, NULL, 10) > SERVER_MAX_BODY) {
            up->too_big = 1;
            return server_error(conn, 413, NULL, NULL, "the body is larger than %u bytes", SERVER_MAX_BODY);
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {  // a piece of the body
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (up->too_big || up->len + n > SERVER_MAX_BODY) {
            up->too_big = 1;
            return MHD_YES;
        }
        if (up->len + n > up->cap) {
            up->cap = 2 * (up->len + n);
            if (up->cap > SERVER_MAX_BODY) up->cap = SERVER_MAX_BODY;
            up->body = (char*)realloc_check(up->body, up->cap);
        }
        memcpy(up->body + up->len, upload_data, n);
        up->len += n;
        return MHD_YES;
    }
    int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0, post = strcmp(method, "POST") == 0;
    if (strcmp(url, "/v1/completions") == 0) {
        if (!post) return server_error(conn, 405, NULL, NULL, "%s /v1/completions: use POST", method);
        if (up->too_big) return server_error(conn, 413, NULL, NULL, "the body is larger than %u bytes", SERVER_MAX_BODY);
        return server_completions(s, conn, up->body != NULL ? up->body : "", up->len);
    }
    int models = strcmp(url, "/v1/models") == 0 || strncmp(url, "/v1/models/", strlen("/v1/models/")) == 0;
    if (models || strcmp(url, "/health") == 0) {
        if (!get) return server_error(conn, 405, NULL, NULL, "%s %s: use GET", method, url);
        return models ? server_models(s, conn, url) : server_health(s, conn);
    }
    return server_error(conn, 404, NULL, "not_found", "no such endpoint: %s %.200s (this server has POST "
                        "/v1/completions, GET /v1/models, GET /health)", method, url);
}

static void server_request_done(void* cls, struct MHD_Connection* conn, void** con_cls,
                                enum MHD_RequestTerminationCode why) {
    (void)cls;
    (void)conn;
    (void)why;
    ServerUpload* up = (ServerUpload*)*con_cls;
    if (up == NULL) return;
    free(up->body);
    free(up);
    *con_cls = NULL;
}

// ---------- the server ----------

// HOST:PORT, :PORT or PORT (on 127.0.0.1), [IPv6]:PORT, into *addr; fails with a clear message.
static void server_address(const char* spec, struct sockaddr_storage* addr) {
    char host[256];
    const char* colon = strrchr(spec, ':');
    const char* port = colon != NULL ? colon + 1 : spec;
    size_t host_len = colon != NULL ? (size_t)(colon - spec) : 0;
    if (host_len >= sizeof(host)) fail("--serve %s: the host name is too long", spec);
    memcpy(host, spec, host_len);
    host[host_len] = '\0';
    if (host_len >= 2 && host[0] == '[' && host[host_len - 1] == ']') {
        memmove(host, host + 1, host_len - 2);
        host[host_len - 2] = '\0';
    }
    char* end;
    long p = strtol(port, &end, 10);
    if (*port == '\0' || *end != '\0' || p < 0 || p > 65535) {
        fail("--serve %s: expected HOST:PORT with a port from 0 to 65535 (0: any free one)", spec);
    }
    struct addrinfo hints, *res;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int err = getaddrinfo(host[0] != '\0' ? host : "127.0.0.1", port, &hints, &res);
    if (err != 0) fail("--serve %s: %s", spec, gai_strerror(err));
    memset(addr, 0, sizeof(*addr));
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
}

// The signal thread: waits for SIGINT or SIGTERM, which every thread has blocked
// (server_block_signals); then no new request is taken, the ones in flight have
// SERVER_DRAIN_SECONDS to finish (a second signal: none) and SERVER_FAREWELL_SECONDS more to send
// what they were cut short with, and the engine's thread is told to end.
static void* server_signal_main(void* arg) {
    Server* s = (Server*)arg;
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    int sig;
    sigwait(&signals, &sig);
    fprintf(stderr, "server: %s: no new requests; those in flight have %d s to finish (again: stop now)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", SERVER_DRAIN_SECONDS);
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    s->drain_end = now_seconds() + SERVER_DRAIN_SECONDS;
    pthread_mutex_unlock(&s->lock);
    MHD_socket listen_fd = MHD_quiesce_daemon(s->daemon);
    if (listen_fd != MHD_INVALID_SOCKET) close(listen_fd);
    // until every request is answered; each waiting one sees the end within SERVER_POLL_MS. A
    // stream whose client does not read waits for room in its socket, not for the engine, and
    // would hold the server until libmicrohttpd's idle timeout: past the farewell it is closed.
    struct timespec poll_time = {0, SERVER_POLL_MS * 1000000L};
    for (;;) {
        pthread_mutex_lock(&s->lock);
        int calls = s->calls;
        double end = s->drain_end;
        pthread_mutex_unlock(&s->lock);
        if (calls == 0 || now_seconds() > end + SERVER_FAREWELL_SECONDS) break;
        if (sigtimedwait(&signals, NULL, &poll_time) > 0) {
            pthread_mutex_lock(&s->lock);
            s->drain_end = now_seconds();  // cut short now
            pthread_mutex_unlock(&s->lock);
        }
    }
    MHD_stop_daemon(s->daemon);  // closes the connections left, idle or not
    pthread_mutex_lock(&s->lock);
    s->quit = 1;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

// Starts serving: then server_engine_loop runs the engine in the caller's thread (the one that
// built the model) until SIGINT or SIGTERM, which the caller has blocked in every thread
// (server_block_signals): no new request is taken, the ones in flight have SERVER_DRAIN_SECONDS
// to finish (a second signal: none) and SERVER_FAREWELL_SECONDS more to send what they were cut
// short with; server_stop ends it and returns 0.
static void server_start(Server* s, Engine* e, const ServerOptions* opt) {
    memset(s, 0, sizeof(*s));
    s->engine = e;
    s->opt = *opt;
    s->created = (long)time(NULL);
    s->cancels = (int*)malloc_check((size_t)e->slots * sizeof(int));
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    e->in_order = 0;
    e->on_token = server_on_token;
    e->on_result = server_on_result;
    e->user = s;

    struct sockaddr_storage addr = opt->addr;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ITC;
    if (addr.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, server_route, s,
                                MHD_OPTION_SOCK_ADDR, (struct sockaddr*)&addr,
                                MHD_OPTION_CONNECTION_LIMIT, (unsigned)opt->connections,
                                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)SERVER_IDLE_SECONDS,
                                MHD_OPTION_NOTIFY_COMPLETED, server_request_done, s,
                                MHD_OPTION_THREAD_STACK_SIZE, (size_t)(1 << 20),
                                MHD_OPTION_END);
    if (s->daemon == NULL) fail("--serve %s: cannot listen there (in use, or not an address of this machine?)",
                               opt->address);
    // where it listens, the port too when 0 asked for any
    const union MHD_DaemonInfo* info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_LISTEN_FD);
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof(bound);
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (info != NULL && getsockname(info->listen_fd, (struct sockaddr*)&bound, &bound_len) == 0) {
        if (bound.ss_family == AF_INET6) {
            struct sockaddr_in6* a = (struct sockaddr_in6*)&bound;
            inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
            port = ntohs(a->sin6_port);
        } else {
            struct sockaddr_in* a = (struct sockaddr_in*)&bound;
            inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
            port = ntohs(a->sin_port);
        }
    }
    fprintf(stderr, "serving %s on http://%s%s%s:%d/v1 (POST /v1/completions, GET /v1/models, GET /health): up to "
            "%d sequences at once (-b), %d choices waiting (-q), %d connections (-c), %g s a request (-t)\n",
            opt->model, bound.ss_family == AF_INET6 ? "[" : "", host, bound.ss_family == AF_INET6 ? "]" : "", port,
            e->slots, opt->queue, opt->connections, opt->time_limit);
    if (pthread_create(&s->signal_thread, NULL, server_signal_main, s) != 0) fail("server: cannot start a thread");
}

// After server_engine_loop (the signal thread has said quit): the threads joined, the report.
static int server_stop(Server* s) {
    Engine* e = s->engine;
    pthread_join(s->signal_thread, NULL);
    fprintf(stderr, "server: stopped after %ld requests (%ld failed); kv pages: peak %d of %d, %d in use\n",
            s->requests, s->failed, e->pool.peak, e->pool.num_pages, e->pool.in_use);
    free(s->cancels);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->lock);
    return 0;
}

// Blocks SIGINT and SIGTERM in this thread and in every thread it starts from now on, so that
// server_start's signal thread receives them; and ignores SIGPIPE (a client gone mid-answer is an
// error on its connection, not the end of the server).
static void server_block_signals(void) {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);
    signal(SIGPIPE, SIG_IGN);
}

#endif // GPT2_SERVER_H
