/* test_gw_tls: the credential path's guest-facing TLS (tls_ca.h). Handshakes run in
 * memory (a BIO pair) between a leaf minted by a fresh CA and clients of different
 * kinds: a modern one gets an EC leaf that verifies against the CA for the exact name;
 * a TLS 1.2 client offering RSA suites only gets an RSA leaf; and the ClientHello
 * busybox wget's own TLS sends (captured from busybox 1.35: TLS 1.2, no
 * signature_algorithms extension) is answered with a ServerHello, not an alert. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "gateway/tls_ca.h"

struct fixture {
    struct tls_ca *ca;
    char dir[64];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    char err[256];
    strcpy(f->dir, "/tmp/test_gw_tls.XXXXXX");
    if (!f || !mkdtemp(f->dir) || tls_ca_open(f->dir, NULL, &f->ca, err, sizeof err) != 0)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    char cmd[128];
    tls_ca_free(f->ca);
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    int rc = system(cmd);
    free(f);
    return rc == 0 ? 0 : -1;
}

/* Runs both handshakes to the end over a BIO pair; 1 when both finished. */
static int handshake(SSL *cli, SSL *srv)
{
    BIO *a, *b;
    assert_int_equal(BIO_new_bio_pair(&a, 0, &b, 0), 1);
    SSL_set_bio(cli, a, a);
    SSL_set_bio(srv, b, b);
    int c = 0, s = 0;
    for (int i = 0; i < 20 && (c != 1 || s != 1); i++) {
        if (c != 1)
            c = SSL_do_handshake(cli);
        if (s != 1)
            s = SSL_do_handshake(srv);
        if ((c <= 0 && SSL_get_error(cli, c) != SSL_ERROR_WANT_READ) ||
            (s <= 0 && SSL_get_error(srv, s) != SSL_ERROR_WANT_READ)) {
            ERR_print_errors_fp(stderr);
            return 0;
        }
    }
    return c == 1 && s == 1;
}

/* A client context trusting the test CA, limited to `ciphers` (NULL: defaults). */
static SSL *client(struct fixture *f, int max_version, const char *ciphers)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    assert_non_null(ctx);
    assert_int_equal(SSL_CTX_load_verify_locations(ctx, tls_ca_cert_path(f->ca), NULL), 1);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (max_version)
        SSL_CTX_set_max_proto_version(ctx, max_version);
    if (ciphers)
        assert_int_equal(SSL_CTX_set_cipher_list(ctx, ciphers), 1);
    SSL *ssl = SSL_new(ctx);
    SSL_CTX_free(ctx); /* the SSL holds its own reference */
    assert_non_null(ssl);
    SSL_set_tlsext_host_name(ssl, "api.test");
    SSL_set1_host(ssl, "api.test");
    SSL_set_connect_state(ssl);
    return ssl;
}

static int peer_key_type(SSL *cli)
{
    X509 *peer = SSL_get1_peer_certificate(cli);
    assert_non_null(peer);
    int t = EVP_PKEY_get_base_id(X509_get0_pubkey(peer));
    X509_free(peer);
    return t;
}

static void test_modern_client_gets_ec_leaf(void **state)
{
    struct fixture *f = *state;
    SSL *srv = tls_ca_server_ssl(f->ca, "api.test"), *cli = client(f, 0, NULL);
    assert_non_null(srv);
    SSL_set_accept_state(srv);
    assert_int_equal(handshake(cli, srv), 1);
    assert_int_equal(SSL_get_verify_result(cli), X509_V_OK);
    assert_int_equal(peer_key_type(cli), EVP_PKEY_EC);
    SSL_free(cli);
    SSL_free(srv);
}

static void test_rsa_only_client_gets_rsa_leaf(void **state)
{
    struct fixture *f = *state;
    for (int round = 0; round < 2; round++) { /* the second one comes from the cache */
        SSL *srv = tls_ca_server_ssl(f->ca, "api.test");
        SSL *cli = client(f, TLS1_2_VERSION, "aRSA");
        SSL_set_accept_state(srv);
        assert_int_equal(handshake(cli, srv), 1);
        assert_int_equal(SSL_get_verify_result(cli), X509_V_OK);
        assert_int_equal(peer_key_type(cli), EVP_PKEY_RSA);
        SSL_free(cli);
        SSL_free(srv);
    }
}

static void test_leaf_is_for_the_exact_name(void **state)
{
    struct fixture *f = *state;
    SSL *srv = tls_ca_server_ssl(f->ca, "other.test"), *cli = client(f, 0, NULL);
    SSL_set_accept_state(srv);
    assert_int_equal(handshake(cli, srv), 0); /* the client wanted api.test */
    assert_int_equal(SSL_get_verify_result(cli), X509_V_ERR_HOSTNAME_MISMATCH);
    SSL_free(cli);
    SSL_free(srv);
}

/* busybox 1.35 `wget https://localhost/` without openssl on PATH (its own TLS). */
static const char busybox_hello[] =
    "160303005901000055030380ee68966584ee51b9a9a6bc2ecaabd2a25e1c7a9bce40d3b44bcb0e2ca74f3d"
    "00001000ffc023c027c02bc02f003c003d009c0100001c0000000e000c0000096c6f63616c686f7374000a"
    "000600040017001d";

static void test_busybox_hello_gets_a_server_hello(void **state)
{
    struct fixture *f = *state;
    unsigned char hello[sizeof busybox_hello / 2];
    for (size_t i = 0; i < sizeof hello; i++)
        assert_int_equal(sscanf(busybox_hello + 2 * i, "%2hhx", &hello[i]), 1);
    SSL *srv = tls_ca_server_ssl(f->ca, "localhost");
    BIO *in = BIO_new(BIO_s_mem()), *out = BIO_new(BIO_s_mem());
    BIO_write(in, hello, sizeof hello);
    SSL_set_bio(srv, in, out);
    SSL_set_accept_state(srv);
    int r = SSL_do_handshake(srv);
    assert_int_equal(SSL_get_error(srv, r), SSL_ERROR_WANT_READ); /* waits for the next flight */
    const unsigned char *p;
    long n = BIO_get_mem_data(out, (char **)&p);
    assert_true(n > 6);
    assert_int_equal(p[0], 0x16); /* handshake record, not an alert (0x15) */
    assert_int_equal(p[5], 0x02); /* ServerHello */
    SSL_free(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_modern_client_gets_ec_leaf),
        cmocka_unit_test(test_rsa_only_client_gets_rsa_leaf),
        cmocka_unit_test(test_leaf_is_for_the_exact_name),
        cmocka_unit_test(test_busybox_hello_gets_a_server_hello),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
