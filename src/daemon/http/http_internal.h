/* http_internal: the structures shared by http_conn.c (connections, body pump),
 * http_req.c (request accessors) and http_reply.c (responses). Not for other modules:
 * they use the opaque API in http.h.
 *
 * Reentrancy rule: functions the application calls (replies, body claims, pause) never
 * free a request or a connection and never call back into the application; they set
 * state and schedule the connection's deferred event, whose handler (conn_process)
 * does the work from a clean stack. */
#ifndef SPACE_HTTP_INTERNAL_H
#define SPACE_HTTP_INTERNAL_H

#include <time.h>

#include "http.h"
#include "http_parse.h"

struct bufferevent;
struct evbuffer;
struct event;
struct evconnlistener;

#define HTTP_MAX_LISTENERS 8
/* Input buffered before reading pauses: bounds memory per connection. */
#define HTTP_READ_HIGH (256 * 1024)
/* An unclaimed or abandoned body is read and dropped if at most this much remains;
 * larger ones cost the connection instead. */
#define HTTP_DISCARD_MAX (64 * 1024)

/* A decoded name/value pair (query parameters, path parameters). Both owned. */
struct http_kv {
    char *name;
    char *value;
};

struct http_server {
    struct event_base *base;            /* not owned */
    struct http_limits lim;             /* copy, defaults filled in */
    struct http_parse_limits plim;      /* derived from lim for the parser */
    size_t read_high;                   /* input buffered per connection before reading
                                           stops: HTTP_READ_HIGH, or more if a whole head
                                           may be larger */
    http_handler_fn dispatch;           /* application entry point */
    void *dispatch_arg;
    struct evconnlistener *listeners[HTTP_MAX_LISTENERS]; /* owned */
    unsigned nlisteners;
    int port;                           /* port of the last listener */
    struct event *accept_retry;         /* owned; re-enables accepting after EMFILE */
    struct http_conn *conns;            /* owned list of open connections */
    unsigned nconns;
    time_t date_sec;                    /* second the cached Date value is for */
    char date[40];                      /* cached IMF-fixdate */
};

enum http_body_mode {
    BODY_UNCLAIMED = 0,  /* the application has not asked for the body yet */
    BODY_BUFFERED,       /* http_req_read_body: collected into body_buf */
    BODY_STREAMED,       /* http_req_stream_body: chunk callbacks */
    BODY_DISCARD,        /* application finished: drop the rest */
};

enum http_resp_state {
    RESP_NONE = 0,       /* nothing sent */
    RESP_STREAM,         /* head sent, streaming */
    RESP_DONE,           /* complete (or abandoned) */
};

struct http_req {
    struct http_conn *conn;          /* owner */
    struct http_head head;           /* owned parsed head */
    char *path;                      /* owned, decoded path */
    struct http_kv *query;           /* owned array of decoded query pairs */
    unsigned nquery;
    struct http_kv *params;          /* owned array of router parameters */
    unsigned nparams;
    void *user;                      /* application's; never touched */
    http_handler_fn route_fn;        /* the handler a router chose (http_req_set_route) */
    void *route_arg;
    http_close_fn on_close;          /* fired if the request dies before app_done */
    void *close_arg;
    bool app_done;                   /* application's part over: handle is dead */

    /* body (request) */
    enum http_body_mode body_mode;
    bool body_done;                  /* every body byte has been consumed from the wire */
    uint64_t body_left;              /* Content-Length bytes still to read */
    struct http_chunked chunked;     /* decoder when head.chunked */
    bool paused;                     /* application asked for backpressure */
    bool continue_sent;              /* "100 Continue" written */
    size_t body_max;                 /* BODY_BUFFERED limit */
    struct evbuffer *body_buf;       /* owned, BODY_BUFFERED accumulator */
    uint64_t body_seen;              /* decoded body bytes so far */
    http_body_fn done_cb;
    http_chunk_fn chunk_cb;
    http_end_fn end_cb;
    void *body_arg;
    int body_error;                  /* pending server-side failure status (413) */

    /* response */
    struct evbuffer *extra_headers;  /* owned, "Name: value\r\n" lines from the app */
    enum http_resp_state resp;
    int status;
    bool stream_chunked;             /* stream framed as chunks */
    int64_t stream_len;              /* declared length, -1 if none */
    uint64_t bytes_out;              /* body bytes written */
    http_drain_fn drain_cb;
    void *drain_arg;
    int64_t start_us;                /* when the head was dispatched (clock_mono_us) */
    http_upgrade_fn upgrade_cb;      /* set by http_req_upgrade: hand-over pending */
    void *upgrade_arg;
};

struct http_conn {
    struct http_server *srv;         /* owner of this connection */
    struct http_conn *prev, *next;   /* srv->conns list links */
    struct bufferevent *bev;         /* owned, owns the socket; used for writing only */
    struct evbuffer *in;             /* owned; bytes read, not yet consumed */
    struct event *rd_ev;             /* owned; socket readable (we read, not the bev) */
    struct event *head_timer;        /* owned; head deadline / keep-alive idle / linger */
    struct event *defer;             /* owned; runs conn_process from the loop */
    char peer[64];                   /* "ip:port" */
    struct http_req *req;            /* owned, the request being served, or NULL */
    size_t scan;                     /* head terminator search resume offset */
    bool head_started;               /* bytes of the next head have arrived */
    bool close_after;                /* close once the current request is finished */
    bool closing;                    /* flush output, then half-close and linger */
    bool lingering;                  /* FIN sent; reading and dropping until EOF/deadline */
    bool eof;                        /* the peer finished sending */
};

/* http_conn.c */
void http_conn_schedule(struct http_conn *c);
/* Sets the timeouts to match the state: write progress always; read idle only while a
 * body is being actively consumed (or while lingering). */
void http_conn_update_timeouts(struct http_conn *c);
struct evbuffer *http_conn_output(struct http_conn *c);
int http_conn_fd(struct http_conn *c);
/* Takes the connection out of its server's list (and count); the caller frees it or hands
 * it over. */
void http_conn_unlink(struct http_conn *c);

/* http_upgrade.c */
/* Gives the connection of a request with a pending upgrade to its new owner and frees
 * everything else of it (request included). Only from the event loop (conn_advance). */
void http_conn_handover(struct http_conn *c);

/* http_req.c */
/* Builds a request from a parsed head (takes ownership of *head on success and on
 * failure). Returns NULL and fills *err on a bad target or allocation failure. */
struct http_req *http_req_new(struct http_conn *c, struct http_head *head,
                              struct http_parse_error *err);
void http_req_free(struct http_req *r);

/* http_reply.c */
/* Marks the application's part over: logs the response line, decides whether the
 * leftover body is drained or the connection closed, schedules processing. */
void http_req_finish(struct http_req *r);
/* Writes a complete JSON error response for a request (or none, r == NULL, when the
 * head was invalid) straight to the connection, marks the connection closing and the
 * request's reply done (the caller fires on_close). */
void http_conn_send_error(struct http_conn *c, struct http_req *r, int status, const char *code,
                          const char *message);
/* Whether the connection can carry another request once this reply is written;
 * sets c->close_after when not. */
bool http_req_keep_alive(struct http_req *r);
/* Logs the one line per response. */
void http_log_response(struct http_conn *c, const struct http_req *r, int status, uint64_t bytes);

#endif
