/* tls_ca: the per-deployment certificate authority used where the gateway terminates
 * TLS (credential injection), and the upstream TLS client context.
 *
 * At first start the CA (EC P-256 key, 10-year self-signed certificate, CA:TRUE,
 * pathlen 0, keyCertSign only) is generated under <data-dir>/ca/: space-ca.key (0600,
 * never leaves the host) and space-ca.crt (public; guest templates install it as a
 * trusted root). Leaf certificates are minted on demand for the exact SNI name
 * (subjectAltName DNS:<name>, serverAuth, valid 7 days) and cached per (name, key type).
 *
 * The leaf's key type follows the guest's ClientHello (a callback runs before OpenSSL
 * picks a suite): an EC P-256 key (process-wide, made at open) for every client that
 * can use ECDSA (TLS 1.3, or an ECDHE-ECDSA suite offered), an RSA-2048 key
 * (process-wide, made on first need: generating it takes a while) for TLS 1.2 clients
 * that offer RSA suites only. A TLS 1.2 client that sends no signature_algorithms
 * extension (busybox wget's own TLS) asks, per RFC 5246 7.4.1.4.1, for SHA-1
 * signatures, which OpenSSL 3 refuses at its default security level: for that one
 * connection the level is lowered to 0. This leg runs between the gateway and the
 * guest only; the guest is the party the gateway defends against, and neither the
 * secret nor anything from upstream is protected by this leg's signature.
 *
 * Upstream connections verify the peer chain against the configured trust store and
 * the exact host name. */
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

/* A new server-side SSL (caller owns it) that will present a leaf for `name` (key type
 * chosen from the ClientHello, see above), ALPN limited to http/1.1. NULL on failure. */
SSL *tls_ca_server_ssl(struct tls_ca *ca, const char *name);

/* A new client-side SSL (caller owns it) for `name`: SNI set, chain verified against
 * the trust store, host name checked, ALPN http/1.1. NULL on failure. */
SSL *tls_ca_client_ssl(struct tls_ca *ca, const char *name);

/* Path of the CA certificate (inside the CA object). */
const char *tls_ca_cert_path(const struct tls_ca *ca);

#endif
