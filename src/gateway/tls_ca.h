/* tls_ca: the per-deployment certificate authority used where the gateway terminates
 * TLS (credential injection), and the upstream TLS client context.
 *
 * At first start the CA (EC P-256 key, 10-year self-signed certificate, CA:TRUE,
 * pathlen 0, keyCertSign only) is generated under <data-dir>/ca/: space-ca.key (0600,
 * never leaves the host) and space-ca.crt (public; guest templates install it as a
 * trusted root). Leaf certificates are minted on demand for the exact SNI name
 * (subjectAltName DNS:<name>, serverAuth, valid 7 days) with one process-wide leaf key,
 * and cached per name. Upstream connections verify the peer chain against the
 * configured trust store and the exact host name. */
#ifndef SPACE_GW_TLS_CA_H
#define SPACE_GW_TLS_CA_H

#include <openssl/ssl.h>
#include <stddef.h>

struct tls_ca;

/* Loads <dir>/space-ca.{crt,key}, creating both (and dir) if absent. *out is owned by
 * the caller (tls_ca_free). Returns 0, or -1 with err filled. */
int tls_ca_open(const char *dir, const char *trust_file, struct tls_ca **out, char *err,
                size_t errlen);
void tls_ca_free(struct tls_ca *ca);

/* A new server-side SSL (caller owns it) presenting a leaf for `name`, ALPN limited to
 * http/1.1. NULL on failure. */
SSL *tls_ca_server_ssl(struct tls_ca *ca, const char *name);

/* A new client-side SSL (caller owns it) for `name`: SNI set, chain verified against
 * the trust store, host name checked, ALPN http/1.1. NULL on failure. */
SSL *tls_ca_client_ssl(struct tls_ca *ca, const char *name);

/* Path of the CA certificate (inside the CA object). */
const char *tls_ca_cert_path(const struct tls_ca *ca);

#endif
