# Optional dependencies, each an explicit option that is ON by default. A
# dependency that is ON and missing fails the configure step with the Debian
# package to install; -DLC_WITH_<NAME>=OFF builds without it, and what needs
# it (code paths that then return LC_ENOTSUP, and their tests) is left out,
# said once below. Nothing vanishes from ctest silently.
#
#   lc_dependency(NAME pkg-config-module "Debian package" "what needs it" "left out when OFF")
macro(lc_dependency name module debpkg what absent)
  option(LC_WITH_${name} "build with ${what} (pkg-config ${module}; Debian ${debpkg})" ON)
  if(LC_WITH_${name})
    pkg_check_modules(${name} IMPORTED_TARGET ${module})
    if(NOT ${name}_FOUND)
      message(FATAL_ERROR
        "layercake: ${module} not found; it is needed for ${what}.\n"
        "Install it (Debian: apt-get install ${debpkg}; scripts/deps.sh installs every "
        "package), or configure with -DLC_WITH_${name}=OFF to build without it "
        "(then left out: ${absent}).")
    endif()
  else()
    # pkg_check_modules caches its result: a build folder switched to OFF
    # must not keep using what an earlier run found.
    set(${name}_FOUND FALSE)
    message(STATUS "layercake: built without ${what} (LC_WITH_${name}=OFF); left out: ${absent}")
  endif()
endmacro()

set(LC_CONTROL_TESTS "the control plane's tests (control.*, faults.*, security.*, soak.*, demo.*, adversarial.* but accounting_unit)")
lc_dependency(ZMQ libzmq libzmq3-dev "the control plane (ZeroMQ)"
  "lc_prefill/lc_decode (LC_ENOTSUP), ${LC_CONTROL_TESTS}")
lc_dependency(MHD libmicrohttpd libmicrohttpd-dev "the bootstrap server (libmicrohttpd)"
  "lc_bootstrap_start (LC_ENOTSUP), ${LC_CONTROL_TESTS}")
lc_dependency(CURL libcurl libcurl4-openssl-dev "the bootstrap client (libcurl)"
  "bootstrap lookups and registration (LC_ENOTSUP), ${LC_CONTROL_TESTS}")
lc_dependency(JSONC json-c libjson-c-dev "the bootstrap's JSON (json-c)"
  "the bootstrap server and client (LC_ENOTSUP), ${LC_CONTROL_TESTS}")
lc_dependency(UCX ucx libucx-dev "the ucx:// transport (UCX)"
  "ucx:// (LC_ERR_NO_TRANSPORT), conformance.ucx_*, ucx.revoke.*, demo.ucx, demo.bench_transport_ucx")
lc_dependency(CMOCKA cmocka libcmocka-dev "the unit tests (cmocka)"
  "unit.*, adversarial.accounting_unit")

# Python: the demo checker and the Python package's tests.
option(LC_WITH_PYTHON "run the Python tests and the demo checks (python3 with pytest and numpy)" ON)
if(LC_WITH_PYTHON)
  set(LC_PYTHON /usr/bin/python3 CACHE FILEPATH "interpreter for the Python tests")
  execute_process(COMMAND ${LC_PYTHON} -c "import pytest, numpy"
    RESULT_VARIABLE lc_python_rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT lc_python_rc EQUAL 0)
    message(FATAL_ERROR
      "layercake: ${LC_PYTHON} with pytest and numpy not found; they run python.pytest and "
      "the demo.* checks.\nInstall them (Debian: apt-get install python3 python3-pytest "
      "python3-numpy), or configure with -DLC_WITH_PYTHON=OFF (then left out: python.pytest, "
      "demo.*).")
  endif()
else()
  message(STATUS "layercake: built without the Python tests (LC_WITH_PYTHON=OFF); left out: python.pytest, demo.*")
endif()
