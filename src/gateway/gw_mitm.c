/* gw_mitm.c: the credential-injection path. For a host with a credential rule the
 * gateway terminates the guest's TLS with a leaf minted by the per-deployment CA,
 * opens its own TLS connection to an address it resolved, verifying the real
 * certificate chain and host name, then treats the decrypted stream like port 80:
 * every request's Host must be the SNI name (421 otherwise), and the credential header
 * is removed from what the guest sent and the real value added (gw_conn.c
 * http_emit_head); every copy of the value in what the upstream sends back is
 * overwritten (gw_scrub.c). The secret exists only here, in gateway memory. */
#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_conn.h"

int gw_mitm_start(struct gw_conn *c, uint32_t addr, const struct gw_cred *cred)
{
    struct event_base *base = c->sb->gw->base;
    SSL *srv = tls_ca_server_ssl(c->sb->gw->ca, c->name);
    SSL *cli = tls_ca_client_ssl(c->sb->gw->ca, c->name);
    char *secret = strdup(cred->value);
    struct gw_scrub *scrub = gw_scrub_new(cred->value);
    struct bufferevent *up = NULL;
    if (!srv || !cli || !secret || !scrub)
        goto fail;
    up = bufferevent_openssl_socket_new(base, -1, cli, BUFFEREVENT_SSL_CONNECTING,
                                        BEV_OPT_CLOSE_ON_FREE);
    if (!up)
        goto fail;
    cli = NULL; /* owned by up now */
    /* The ClientHello is still unread in the socket bufferevent's input: the TLS filter
     * reads it from there. The filter takes ownership of the socket bufferevent.
     * Its callbacks are deferred: a handshake that fails at once (the ClientHello is
     * already here) would otherwise run gw_conn_down_event, and free c, from inside
     * bufferevent_enable below, under this function and its callers. */
    struct bufferevent *down = bufferevent_openssl_filter_new(base, c->down, srv,
                                                              BUFFEREVENT_SSL_ACCEPTING,
                                                              BEV_OPT_CLOSE_ON_FREE |
                                                              BEV_OPT_DEFER_CALLBACKS);
    if (!down)
        goto fail;
    struct bufferevent *sock = c->down;
    c->down = down;
    c->mitm = true;
    c->up = up;
    c->cred_value = secret;
    c->scrub = scrub;
    snprintf(c->cred_header, sizeof c->cred_header, "%s", cred->header);
    /* c is complete from here on: every failure below is the caller's deny, which
     * frees both sides. The upstream is dialled before the guest side is enabled, so
     * nothing after the enable touches c. */
    bufferevent_setcb(up, gw_conn_up_read, gw_conn_write_done, gw_conn_up_event, c);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(c->port),
                             .sin_addr.s_addr = htonl(addr)};
    if (bufferevent_socket_connect(up, (struct sockaddr *)&sa, sizeof sa) != 0)
        return -1;
    bufferevent_setwatermark(sock, EV_READ, 0, 0);
    bufferevent_setwatermark(down, EV_READ, 0, GWHTTP_HEAD_MAX + 65536);
    bufferevent_setcb(down, gw_conn_down_read, gw_conn_write_done, gw_conn_down_event, c);
    bufferevent_enable(down, EV_READ | EV_WRITE);
    /* Bytes already buffered raise no new read event: kick the handshake once. */
    bufferevent_trigger(sock, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
    return 0;
fail:
    SSL_free(srv);
    SSL_free(cli);
    free(secret);
    gw_scrub_free(scrub);
    if (up)
        bufferevent_free(up);
    return -1;
}

void gw_mitm_tls_reason(struct bufferevent *bev, bool upstream, char *out, size_t cap)
{
    SSL *ssl = bufferevent_openssl_get_ssl(bev);
    long verify = upstream && ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
    unsigned long e = bufferevent_get_openssl_error(bev);
    const char *why = e ? ERR_reason_error_string(e) : NULL;
    if (verify != X509_V_OK)
        snprintf(out, cap, "upstream_cert: %s", X509_verify_cert_error_string(verify));
    else
        snprintf(out, cap, "%s: %s", upstream ? "upstream_tls_failed" : "client_tls_failed",
                 why ? why : "connection closed during the handshake");
    /* Whatever else this failure queued must not be blamed on the next connection. */
    while (bufferevent_get_openssl_error(bev))
        ;
}
