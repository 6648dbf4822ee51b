/* tls_ca.c: CA creation/loading, leaf minting, TLS contexts; see tls_ca.h. */
#include "tls_ca.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy.h"

#define LEAF_CACHE 64
#define RSA_BITS 2048

enum leaf_kind { LEAF_EC, LEAF_RSA, LEAF_KINDS };

struct leaf {
    char name[POLICY_NAME_MAX + 1];
    enum leaf_kind kind;
    X509 *cert; /* owned */
};

struct tls_ca {
    X509 *cert;         /* owned: CA certificate */
    EVP_PKEY *key;      /* owned: CA key */
    EVP_PKEY *leaf_key[LEAF_KINDS]; /* owned: key of every leaf of that kind (RSA: NULL
                                       until first needed) */
    SSL_CTX *server;    /* owned: guest-facing context */
    SSL_CTX *client;    /* owned: upstream context with the trust store */
    struct leaf leaves[LEAF_CACHE];
    size_t next_leaf;   /* round-robin replacement slot */
    char cert_path[4096];
};

/* ex_data slot of a server SSL: the name its leaf is for (owned by the SSL). */
static int name_idx = -1;

static int add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (!ext)
        return -1;
    int ok = X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
    return ok ? 0 : -1;
}

/* A certificate shell: random serial, validity, subject CN, issuer and public key. */
static X509 *cert_new(const char *cn, EVP_PKEY *pub, X509 *issuer, long not_before,
                      long lifetime)
{
    X509 *c = X509_new();
    unsigned char serial[16];
    ASN1_INTEGER *sn = NULL;
    BIGNUM *bn = NULL;
    if (!c || RAND_bytes(serial, sizeof serial) != 1)
        goto fail;
    serial[0] &= 0x7f;
    bn = BN_bin2bn(serial, sizeof serial, NULL);
    sn = bn ? BN_to_ASN1_INTEGER(bn, NULL) : NULL;
    X509_NAME *name = X509_get_subject_name(c);
    if (!sn || !X509_set_version(c, 2) || !X509_set_serialNumber(c, sn) ||
        !X509_gmtime_adj(X509_getm_notBefore(c), not_before) ||
        !X509_gmtime_adj(X509_getm_notAfter(c), lifetime) ||
        !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0) ||
        !X509_set_issuer_name(c, issuer ? X509_get_subject_name(issuer) : name) ||
        !X509_set_pubkey(c, pub))
        goto fail;
    ASN1_INTEGER_free(sn);
    BN_free(bn);
    return c;
fail:
    ASN1_INTEGER_free(sn);
    BN_free(bn);
    X509_free(c);
    return NULL;
}

static int ca_create(struct tls_ca *ca, const char *crt, const char *keyp)
{
    ca->key = EVP_EC_gen("P-256");
    if (!ca->key)
        return -1;
    ca->cert = cert_new("space per-deployment egress CA", ca->key, NULL, -3600,
                        10L * 365 * 24 * 3600);
    if (!ca->cert || add_ext(ca->cert, ca->cert, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
        add_ext(ca->cert, ca->cert, NID_key_usage, "critical,keyCertSign,cRLSign") ||
        add_ext(ca->cert, ca->cert, NID_subject_key_identifier, "hash") ||
        !X509_sign(ca->cert, ca->key, EVP_sha256()))
        return -1;
    int kfd = open(keyp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    FILE *kf = kfd >= 0 ? fdopen(kfd, "w") : NULL;
    if (!kf) {
        if (kfd >= 0)
            close(kfd);
        return -1;
    }
    int ok = PEM_write_PrivateKey(kf, ca->key, NULL, NULL, 0, NULL, NULL);
    if (fclose(kf) != 0 || !ok)
        return -1;
    FILE *cf = fopen(crt, "w");
    if (!cf)
        return -1;
    ok = PEM_write_X509(cf, ca->cert);
    return fclose(cf) == 0 && ok ? 0 : -1;
}

static int ca_load(struct tls_ca *ca, const char *crt, const char *keyp)
{
    FILE *cf = fopen(crt, "r"), *kf = fopen(keyp, "r");
    if (cf)
        ca->cert = PEM_read_X509(cf, NULL, NULL, NULL);
    if (kf)
        ca->key = PEM_read_PrivateKey(kf, NULL, NULL, NULL);
    if (cf)
        fclose(cf);
    if (kf)
        fclose(kf);
    return ca->cert && ca->key && X509_check_private_key(ca->cert, ca->key) ? 0 : -1;
}

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned inlen, void *arg)
{
    static const unsigned char h11[] = "\x08http/1.1";
    unsigned char *sel;
    if (SSL_select_next_proto(&sel, outlen, h11, sizeof h11 - 1, in, inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK;
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

static void name_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
                      void *argp)
{
    free(ptr);
}

/* The leaf for (name, kind), minted and cached on first use. */
static X509 *leaf_for(struct tls_ca *ca, const char *name, enum leaf_kind kind)
{
    for (size_t i = 0; i < LEAF_CACHE; i++)
        if (ca->leaves[i].cert && ca->leaves[i].kind == kind && strcmp(ca->leaves[i].name, name) == 0)
            return ca->leaves[i].cert;
    if (!ca->leaf_key[kind] && !(ca->leaf_key[kind] = EVP_RSA_gen(RSA_BITS)))
        return NULL;
    char san[POLICY_NAME_MAX + 8];
    snprintf(san, sizeof san, "DNS:%s", name);
    X509 *c = cert_new(name, ca->leaf_key[kind], ca->cert, -3600, 7L * 24 * 3600);
    /* RSA leaves also do RSA key exchange (keyEncipherment). */
    if (!c || add_ext(c, ca->cert, NID_basic_constraints, "critical,CA:FALSE") ||
        add_ext(c, ca->cert, NID_key_usage, kind == LEAF_RSA ? "critical,digitalSignature,keyEncipherment"
                                                              : "critical,digitalSignature") ||
        add_ext(c, ca->cert, NID_ext_key_usage, "serverAuth") ||
        add_ext(c, ca->cert, NID_subject_alt_name, san) ||
        add_ext(c, ca->cert, NID_authority_key_identifier, "keyid:always") ||
        !X509_sign(c, ca->key, EVP_sha256())) {
        X509_free(c);
        return NULL;
    }
    struct leaf *slot = &ca->leaves[ca->next_leaf++ % LEAF_CACHE];
    X509_free(slot->cert);
    slot->cert = c;
    slot->kind = kind;
    snprintf(slot->name, sizeof slot->name, "%s", name);
    return c;
}

/* RSA only for a client that offers no suite an ECDSA key can serve. TLS 1.3 suites
 * authenticate with any key type (NID_auth_any); so do, on paper, the signalling
 * values such as the renegotiation SCSV, which are no suites at all; TLS 1.3 suites
 * are the ones numbered 0x13XX (RFC 8446 B.4). */
static enum leaf_kind leaf_kind_for(SSL *s)
{
    const unsigned char *ids;
    size_t n = SSL_client_hello_get0_ciphers(s, &ids);
    bool rsa = false;
    for (size_t i = 0; i + 1 < n; i += 2) {
        const SSL_CIPHER *c = SSL_CIPHER_find(s, ids + i);
        int auth = c ? SSL_CIPHER_get_auth_nid(c) : NID_undef;
        if (auth == NID_auth_ecdsa || (auth == NID_auth_any && SSL_CIPHER_get_protocol_id(c) >> 8 == 0x13))
            return LEAF_EC;
        rsa |= auth == NID_auth_rsa;
    }
    return rsa ? LEAF_RSA : LEAF_EC;
}

/* Runs before OpenSSL chooses a suite: installs the leaf matching what the client can
 * use (see tls_ca.h). */
static int client_hello(SSL *s, int *alert, void *arg)
{
    struct tls_ca *ca = arg;
    const char *name = SSL_get_ex_data(s, name_idx);
    const unsigned char *ext;
    size_t extlen;
    enum leaf_kind kind = leaf_kind_for(s);
    X509 *leaf = name ? leaf_for(ca, name, kind) : NULL;
    if (!leaf || SSL_use_certificate(s, leaf) != 1 || SSL_use_PrivateKey(s, ca->leaf_key[kind]) != 1 ||
        SSL_add1_chain_cert(s, ca->cert) != 1) {
        *alert = SSL_AD_INTERNAL_ERROR;
        return SSL_CLIENT_HELLO_ERROR;
    }
    if (SSL_client_hello_get0_ext(s, TLSEXT_TYPE_signature_algorithms, &ext, &extlen) != 1)
        SSL_set_security_level(s, 0); /* SHA-1 signatures: see tls_ca.h */
    return SSL_CLIENT_HELLO_SUCCESS;
}

int tls_ca_open(const char *dir, const char *trust_file, struct tls_ca **out, char *err,
                size_t errlen)
{
    struct tls_ca *ca = calloc(1, sizeof *ca);
    char keyp[4096];
    if (!ca) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(ca->cert_path, sizeof ca->cert_path, "%s/space-ca.crt", dir);
    snprintf(keyp, sizeof keyp, "%s/space-ca.key", dir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "mkdir %s: %s", dir, strerror(errno));
        goto fail;
    }
    if (access(keyp, F_OK) == 0 ? ca_load(ca, ca->cert_path, keyp) : ca_create(ca, ca->cert_path, keyp)) {
        snprintf(err, errlen, "cannot load or create the CA in %s", dir);
        goto fail;
    }
    if (name_idx < 0)
        name_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, name_free);
    ca->leaf_key[LEAF_EC] = EVP_EC_gen("P-256");
    ca->server = SSL_CTX_new(TLS_server_method());
    ca->client = SSL_CTX_new(TLS_client_method());
    if (name_idx < 0 || !ca->leaf_key[LEAF_EC] || !ca->server || !ca->client ||
        !SSL_CTX_set_min_proto_version(ca->server, TLS1_2_VERSION) ||
        !SSL_CTX_set_min_proto_version(ca->client, TLS1_2_VERSION)) {
        snprintf(err, errlen, "TLS context setup failed");
        goto fail;
    }
    SSL_CTX_set_alpn_select_cb(ca->server, alpn_select, NULL);
    SSL_CTX_set_client_hello_cb(ca->server, client_hello, ca);
    SSL_CTX_set_verify(ca->client, SSL_VERIFY_PEER, NULL);
    if (trust_file ? SSL_CTX_load_verify_locations(ca->client, trust_file, NULL) != 1
                   : SSL_CTX_set_default_verify_paths(ca->client) != 1) {
        snprintf(err, errlen, "cannot load trust store %s", trust_file ? trust_file : "(default)");
        goto fail;
    }
    *out = ca;
    return 0;
fail:
    tls_ca_free(ca);
    return -1;
}

void tls_ca_free(struct tls_ca *ca)
{
    if (!ca)
        return;
    for (size_t i = 0; i < LEAF_CACHE; i++)
        X509_free(ca->leaves[i].cert);
    X509_free(ca->cert);
    EVP_PKEY_free(ca->key);
    for (int k = 0; k < LEAF_KINDS; k++)
        EVP_PKEY_free(ca->leaf_key[k]);
    SSL_CTX_free(ca->server);
    SSL_CTX_free(ca->client);
    free(ca);
}

SSL *tls_ca_server_ssl(struct tls_ca *ca, const char *name)
{
    SSL *ssl = SSL_new(ca->server);
    char *copy = strdup(name);
    if (!ssl || !copy || SSL_set_ex_data(ssl, name_idx, copy) != 1) {
        free(copy);
        SSL_free(ssl);
        return NULL;
    }
    return ssl;
}

SSL *tls_ca_client_ssl(struct tls_ca *ca, const char *name)
{
    SSL *ssl = SSL_new(ca->client);
    static const unsigned char h11[] = "\x08http/1.1";
    if (!ssl)
        return NULL;
    if (SSL_set_tlsext_host_name(ssl, name) != 1 || SSL_set1_host(ssl, name) != 1 ||
        SSL_set_alpn_protos(ssl, h11, sizeof h11 - 1) != 0) {
        SSL_free(ssl);
        return NULL;
    }
    return ssl;
}

const char *tls_ca_cert_path(const struct tls_ca *ca)
{
    return ca->cert_path;
}
