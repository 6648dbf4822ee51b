/* Fuzzes the ClientHello parser with the first bytes a sandbox sends on port 443.
 * Properties: a result other than NEED_MORE is final (more bytes never change an
 * accept into something else), every strict prefix of an accepted stream is NEED_MORE
 * or the same verdict, and an accepted SNI is normalised. */
#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "gateway/chello.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct chello ch, pre;
    enum chello_result r = chello_parse(data, size, &ch);
    if (r != CHELLO_OK)
        return 0;
    assert(ch.consumed <= size);
    char again[POLICY_NAME_MAX + 1];
    assert(policy_name_normalise(ch.sni, strlen(ch.sni), again) == 0 && strcmp(again, ch.sni) == 0);
    /* the verdict depends only on the hello's own records */
    assert(chello_parse(data, ch.consumed, &pre) == CHELLO_OK && strcmp(pre.sni, ch.sni) == 0);
    for (size_t cut = 0; cut < ch.consumed; cut += 1 + cut / 4) {
        enum chello_result pr = chello_parse(data, cut, &pre);
        assert(pr == CHELLO_NEED_MORE);
    }
    return 0;
}
