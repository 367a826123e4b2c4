#!/bin/sh
# modules.sh — shardrun as a site installs it:
#   a. Lmod: `make install prefix=DIR` writes
#      DIR/share/modulefiles/shardrun/<version>.lua; with Debian's lmod,
#      `module use` + `module load shardrun` put this shardrun first on PATH
#      (--version answers) and its man pages on MANPATH (`man shardrun`,
#      `man shardrun.yaml`); `module help` names the man pages; `make
#      uninstall` removes the module file
#   b. (long tier) EasyBuild: contrib/easybuild/shardrun-<version>.eb (its
#      version the package's) builds the `make dist` tarball offline into a
#      temporary prefix (ConfigureMake, the SYSTEM toolchain, --with-cuda=no,
#      the tarball's checksum written into a copy, MODULES_TOOL=Lmod; as
#      root, --allow-use-as-root-and-accept-consequences), and the module
#      it generates loads and runs that shardrun
# Runs `make` in the build tree (plain build only); needs lmod and, for b,
# the test virtual environment's easybuild (tests/hf/setup-venv.sh).
. "${SR_SRCDIR:-.}/tests/tap.sh"
cd "$T" || exit 99
LMOD_INIT=/usr/share/lmod/lmod/init/sh
[ -r "$LMOD_INIT" ] || require_or_skip lmod "Lmod is not installed (apt-get install lmod)"
VERSION=$("$SHARDRUN" --version | sed -n 's/^shardrun //p')
# make in the build tree, outside the make that runs this test
submake() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "${SR_BUILDDIR:-.}" "$@"; }

group "a: Lmod" && {
    submake install prefix="$T/p" >inst.out 2>&1
    rc=$?
    mf=$T/p/share/modulefiles/shardrun/$VERSION.lua
    check "a: make install prefix=... installs the module file shardrun/$VERSION.lua (make: $rc)" test -f "$mf" ||
        diag "$(tail -5 inst.out)"
    cat >lmod.sh <<SH
. $LMOD_INIT
module use $T/p/share/modulefiles
module load shardrun || exit 3
echo "path: \$(command -v shardrun)"
shardrun --version
MANPAGER=cat man shardrun 2>/dev/null | head -20 | grep -q 'shardrun.*sharded' && echo "man shardrun: ok"
echo "man -w: \$(man -w shardrun.yaml)"
module help shardrun 2>&1
module list 2>&1
SH
    env -u MODULEPATH -u LOADEDMODULES -u _LMFILES_ PATH=/usr/bin:/bin sh lmod.sh >lmod.out 2>&1
    check "  module load shardrun puts its bin first on PATH and it answers --version" \
        sh -c "grep -qx 'path: $T/p/bin/shardrun' lmod.out && grep -qx 'shardrun $VERSION' lmod.out" || diag "$(cat lmod.out)"
    check "  man shardrun shows the installed page, man -w finds shardrun.yaml(5) under the prefix" \
        sh -c "grep -q 'man shardrun: ok' lmod.out && grep -q 'man -w: $T/p/share/man/man5/shardrun.yaml.5' lmod.out"
    check "  module help names the three man pages" \
        sh -c "grep -q 'man shardrun ' lmod.out && grep -q 'man shardrun.yaml' lmod.out && grep -q 'man shardrun-checkpoint' lmod.out"
    check "  module list shows shardrun/$VERSION" grep -q "shardrun/$VERSION" lmod.out
    check "  the program needs no Slurm library (libslurm, libpmi2: loaded at run time when PMI2 is used)" \
        sh -c "! readelf -d '$T/p/bin/shardrun' | grep NEEDED | grep -Eq 'libslurm|libpmi2'"
    submake uninstall prefix="$T/p" >uninst.out 2>&1
    check "  make uninstall removes the module file" test ! -e "$mf"
}

group --long "b: EasyBuild" && {
    EB=$SR_SRCDIR/contrib/easybuild/shardrun-$VERSION.eb
    HFPY=${SHARDRUN_HF_PYTHON:-$SR_SRCDIR/.venv-hf/bin/python}
    if ! "$HFPY" -c 'import easybuild.framework' 2>/dev/null; then
        skip_or_fail easybuild "b: $HFPY cannot import easybuild (tests/hf/setup-venv.sh; SHARDRUN_HF_PYTHON)"
    elif check "b: the easyconfig for this version exists (contrib/easybuild/shardrun-$VERSION.eb)" test -f "$EB"; then
        mkdir -p src
        submake dist >dist.out 2>&1
        cp "${SR_BUILDDIR:-.}/shardrun-$VERSION.tar.gz" src/ 2>/dev/null
        sha=$(sha256sum "src/shardrun-$VERSION.tar.gz" | cut -d' ' -f1)
        sed "s|^checksums = .*|checksums = ['$sha']|" "$EB" >"shardrun-$VERSION.eb"
        check "  its version line says $VERSION" grep -q "^version = '$VERSION'" "shardrun-$VERSION.eb"
        cat >eb.sh <<SH
. $LMOD_INIT
export MODULES_TOOL=Lmod PATH=$(dirname "$HFPY"):\$PATH
eb shardrun-$VERSION.eb --sourcepath=$T/src --installpath=$T/eb --buildpath=$T/ebbuild --tmpdir=$T/ebtmp \
    --repositorypath=$T/ebrepo --allow-use-as-root-and-accept-consequences --detect-loaded-modules=ignore \
    --disable-cleanup-tmpdir
SH
        timeout 900 env -u MODULEPATH -u LOADEDMODULES -u _LMFILES_ sh eb.sh >eb.out 2>&1
        rc=$?
        check "  eb builds the make dist tarball offline, its sanity checks pass (eb: $rc)" \
            sh -c "[ $rc -eq 0 ] && grep -q 'COMPLETED: Installation ended successfully' eb.out" ||
            diag "$(tail -20 eb.out)"
        check "  it verified the tarball's SHA-256 from the easyconfig" \
            grep -q "Checksum verification for .*shardrun-$VERSION.tar.gz using $sha passed" \
            "$(ls "$T"/eb/software/shardrun/"$VERSION"/easybuild/easybuild-shardrun-*.log 2>/dev/null | head -1)"
        cat >ebload.sh <<SH
. $LMOD_INIT
module use $T/eb/modules/all
module load shardrun/$VERSION || exit 3
echo "path: \$(command -v shardrun)"
shardrun --version
SH
        env -u MODULEPATH -u LOADEDMODULES -u _LMFILES_ PATH=/usr/bin:/bin sh ebload.sh >ebload.out 2>&1
        check "  the module EasyBuild generated loads, and its shardrun answers" \
            sh -c "grep -qx 'path: $T/eb/software/shardrun/$VERSION/bin/shardrun' ebload.out && grep -qx 'shardrun $VERSION' ebload.out" ||
            diag "$(cat ebload.out)"
    fi
}
done_testing
