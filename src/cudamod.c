/* cudamod.c — finding, loading and checking the CUDA module, and the
 * detection that decides whether device: auto loads it; see cudamod.h.
 *
 * dlopen is the well-kept library here (the dynamic loader); what is ours
 * is the lookup order, the checks a module must pass, and the messages.
 * The module is loaded RTLD_NOW (every CUDA library it needs, and every
 * program symbol it calls, resolved at load: a missing library is a load
 * error naming it, never a crash at the first call) and RTLD_LOCAL (its
 * symbols stay its own), and never unloaded: the CUDA runtime's exit
 * handlers live in it. */
#include "srconfig.h"

#include "cudamod.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testhook.h"

#ifdef SR_HAVE_CUDA
#include <dlfcn.h>
#include <glob.h>

#include "sr_abi.h"
#endif

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static bool tried;
static const sr_cudamod *mod; /* under mu */
static char mod_path[PATH_MAX + 32];
static char fail_msg[3 * PATH_MAX]; /* why the load failed (SR_ERR_CONFIG) */

#ifdef SR_HAVE_CUDA
/* The test programs of a CUDA build link the back end in (Makefile.am:
 * they reach its internals); the program itself does not, and then this
 * weak reference is NULL (a GNU/ELF weak symbol: an undefined weak
 * reference links as NULL). */
extern const sr_cudamod sr_cuda_module __attribute__((weak));

/* True when the running program lies in the build tree it was configured
 * in (SR_BUILDDIR, Makefile.am), so that the module built beside it is
 * this build's; an installed program never looks there. */
static bool in_build_tree(void) {
    char exe[PATH_MAX], tree[PATH_MAX];
    if (!realpath("/proc/self/exe", exe) || !realpath(SR_BUILDDIR, tree))
        return false;
    size_t n = strlen(tree);
    return strncmp(exe, tree, n) == 0 && exe[n] == '/';
}

/* Picks the module file: SHARDRUN_CUDA_MODULE alone when set, else the
 * build tree's, else $(pkglibdir)'s.  False with fail_msg set when none
 * exists. */
static bool find_module(void) {
    const char *env = getenv(SR_CUDAMOD_ENV);
    struct stat sb;
    if (env && *env) {
        snprintf(mod_path, sizeof mod_path, "%s", env);
        if (stat(env, &sb) == 0)
            return true;
        snprintf(fail_msg, sizeof fail_msg,
                 "the CUDA back end %s (from %s) cannot be loaded: %s (hint: point %s at this build's "
                 "%s, or unset it to use the installed one)",
                 env, SR_CUDAMOD_ENV, strerror(errno), SR_CUDAMOD_ENV, SR_CUDAMOD_FILE);
        return false;
    }
    char tree_path[PATH_MAX + 32] = "";
    if (in_build_tree()) {
        snprintf(tree_path, sizeof tree_path, "%s/%s", SR_BUILDDIR, SR_CUDAMOD_FILE);
        if (stat(tree_path, &sb) == 0) {
            snprintf(mod_path, sizeof mod_path, "%s", tree_path);
            return true;
        }
    }
    snprintf(mod_path, sizeof mod_path, "%s/%s", SR_PKGLIBDIR, SR_CUDAMOD_FILE);
    if (stat(mod_path, &sb) == 0)
        return true;
    snprintf(fail_msg, sizeof fail_msg,
             "the CUDA back end %s cannot be loaded: %s%s%s (hint: make install puts it there; %s names "
             "another; device: cpu trains without it)",
             mod_path, strerror(errno), tree_path[0] ? "; nor is it in the build tree, " : "", tree_path,
             SR_CUDAMOD_ENV);
    return false;
}

/* Loads mod_path and checks what it hands over; fail_msg on failure. */
static const sr_cudamod *load_module(void) {
    dlerror();
    void *h = dlopen(mod_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(fail_msg, sizeof fail_msg,
                 "the CUDA back end %s cannot be loaded: %s (hint: the CUDA runtime, cuBLASLt and NCCL "
                 "libraries it needs must be on this node, e.g. LD_LIBRARY_PATH with the toolkit's lib64 or "
                 "module load cuda; device: cpu trains without them)",
                 mod_path, e ? e : "dlopen failed");
        return NULL;
    }
    const sr_cudamod *m = dlsym(h, "sr_cuda_module");
    const char *bad = NULL;
    char why[512];
    if (!m) {
        bad = "it exports no sr_cuda_module (not a shardrun CUDA module)";
    } else if (m->interface != SR_CUDAMOD_INTERFACE || m->size != sizeof(sr_cudamod)) {
        snprintf(why, sizeof why, "its interface is %u (%u bytes), this shardrun's %d (%zu bytes)", m->interface,
                 m->size, SR_CUDAMOD_INTERFACE, sizeof(sr_cudamod));
        bad = why;
    } else if (strcmp(m->version, PACKAGE_VERSION) != 0 || strcmp(m->abi, SR_ABI_HASH) != 0) {
        snprintf(why, sizeof why, "it was built for shardrun %s (ABI %s), this is shardrun %s (ABI %s)", m->version,
                 m->abi, PACKAGE_VERSION, SR_ABI_HASH);
        bad = why;
    } else if (strcmp(m->build, SR_CUDAMOD_BUILD) != 0) {
        snprintf(why, sizeof why, "it is a %s build, this shardrun a %s one", m->build, SR_CUDAMOD_BUILD);
        bad = why;
    }
    if (bad) {
        snprintf(fail_msg, sizeof fail_msg,
                 "the CUDA back end %s does not match this shardrun: %s (hint: install the module of this build "
                 "with make install, or point %s at it)",
                 mod_path, bad, SR_CUDAMOD_ENV);
        dlclose(h);
        return NULL;
    }
    return m;
}
#endif

sr_status sr_cudamod_get(const sr_cudamod **out) {
    pthread_mutex_lock(&mu);
    if (!tried) {
        tried = true;
#ifdef SR_HAVE_CUDA
        if (&sr_cuda_module) {
            mod = &sr_cuda_module;
            snprintf(mod_path, sizeof mod_path, "linked in");
        } else if (find_module()) {
            mod = load_module();
        }
#else
        snprintf(fail_msg, sizeof fail_msg,
                 "this shardrun was built without CUDA (hint: device: auto or cpu, or a build configured "
                 "--with-cuda)");
#endif
    }
    const sr_cudamod *m = mod;
    pthread_mutex_unlock(&mu);
    *out = m;
    return m ? SR_OK : sr_error(SR_ERR_CONFIG, "%s", fail_msg);
}

const sr_cudamod *sr_cudamod_loaded(void) {
    pthread_mutex_lock(&mu);
    const sr_cudamod *m = mod;
#ifdef SR_HAVE_CUDA
    if (!m && &sr_cuda_module)
        m = &sr_cuda_module; /* linked in: nothing to load */
#endif
    pthread_mutex_unlock(&mu);
    return m;
}

const char *sr_cudamod_path(void) {
    pthread_mutex_lock(&mu);
    const char *p = mod ? mod_path : NULL;
    pthread_mutex_unlock(&mu);
    return p;
}

static int detect_count;
static char detect_why[512];

/* sr_cudamod_detect's one answer.  The driver library is loaded only when
 * a device node exists, and stays loaded: it was initialised (cuInit), and
 * the module's CUDA runtime loads the same one if the run goes on to use a
 * GPU. */
static void detect(void) {
    const sr_testhooks *t = sr_testhook();
    if (t->gpu_detect >= 0) {
        detect_count = (int)t->gpu_detect;
        snprintf(detect_why, sizeof detect_why, "SHARDRUN_TEST_GPU_DETECT=%d", detect_count);
        return;
    }
#ifdef SR_HAVE_CUDA
    glob_t g;
    int gr = glob("/dev/nvidia[0-9]*", 0, NULL, &g);
    size_t nodes = gr == 0 ? g.gl_pathc : 0;
    if (gr == 0)
        globfree(&g);
    if (nodes == 0) {
        snprintf(detect_why, sizeof detect_why, "no /dev/nvidia<N> device node");
        return;
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(detect_why, sizeof detect_why, "%zu device node%s, but the driver library does not load: %s", nodes,
                 nodes == 1 ? "" : "s", e ? e : "libcuda.so.1");
        return;
    }
    /* the driver API's own signatures (cuda.h), without its header: the
     * program is built against the runtime's */
    int (*cu_init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
    int (*cu_count)(int *) = (int (*)(int *))dlsym(h, "cuDeviceGetCount");
    int r = cu_init ? cu_init(0) : -1, c = 0;
    if (r == 0 && cu_count)
        r = cu_count(&c);
    if (r != 0 || !cu_count)
        snprintf(detect_why, sizeof detect_why, "the driver (libcuda.so.1) finds no usable GPU (CUresult %d)", r);
    else
        snprintf(detect_why, sizeof detect_why, "the driver sees %d GPU%s", c, c == 1 ? "" : "s");
    detect_count = r == 0 ? c : 0;
#else
    snprintf(detect_why, sizeof detect_why, "this shardrun was built without CUDA");
#endif
}

int sr_cudamod_detect(char *why, size_t n) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    (void)pthread_once(&once, detect);
    snprintf(why, n, "%s", detect_why);
    return detect_count;
}
