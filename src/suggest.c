/* suggest.c — the closest name to a mistyped word; see suggest.h. */
#include "srconfig.h"

#include "suggest.h"

#include <ctype.h>
#include <string.h>

/* Written here: Levenshtein over two short words is a dozen lines, and no
 * library this project links (libyaml, OpenSSL, PMIx, OpenBLAS) has it. */
int sr_suggest_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return 99;
    int d[65][65];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int c = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]) ? 0 : 1;
            int m = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < m)
                m = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + c < m)
                m = d[i - 1][j - 1] + c;
            d[i][j] = m;
        }
    return d[la][lb];
}

int sr_suggest_close(const char *word, int d) {
    size_t n = strlen(word);
    return d <= (n <= 3 ? 1 : n <= 6 ? 2 : 3);
}

const char *sr_suggest(const char *word, const char *const *names, int n) {
    const char *best = NULL;
    int bd = 99;
    for (int i = 0; i < n; i++) {
        int d = sr_suggest_distance(word, names[i]);
        if (d < bd) {
            bd = d;
            best = names[i];
        }
    }
    return best && sr_suggest_close(word, bd) ? best : NULL;
}
