# Install rules and packaging (issue 15): `make install PREFIX=...` or
# `cmake --install build --prefix DIR` installs
#   lib/liblayercake.so.<version> (+ .so.<major>, .so)   the library, soname liblayercake.so.<major>
#   include/layercake.h, include/layercake/*.h           the public headers
#   lib/pkgconfig/layercake.pc                           pkg-config (relocatable: ${pcfiledir};
#                                                        an rpath to lib/ outside /usr)
#   lib/cmake/layercake/                                 find_package(layercake) -> layercake::layercake
#   bin/layercake                                        the CLI
#   <LC_INSTALL_PYTHONDIR>/layercake/                    the Python package, with _paths.py
#                                                        naming the installed library
# `cpack -G DEB` (in the build folder) builds a .deb of the same; configure with
# -DCMAKE_INSTALL_PREFIX=/usr for a Debian-style package (`make deb`).
# scripts/check-install.sh (ctest install.check) checks all of it from a temporary prefix.

# The Python wheel (pyproject.toml installs only this component): the library
# inside the package, as layercake/liblayercake.so, the first place
# layercake/_ffi.py looks after $LAYERCAKE_LIB. scikit-build-core makes the
# install prefix the wheel's platlib folder and copies python/layercake/ there
# itself. One file, no soname links (a wheel holds no symlinks); it is loaded
# by path. The C module goes beside it (python/speedups/). Its runtime
# dependencies are the libraries it links: in `pip wheel .` the host's
# (layercake/_deps.py names their Debian packages), in `make wheel`'s
# manylinux wheel copies inside it (scripts/build-wheel.sh). CUDA and UCX are
# loaded at run time (dlopen), never linked.
if(LC_WHEEL)
  install(FILES $<TARGET_FILE:layercake> DESTINATION layercake RENAME liblayercake.so
    COMPONENT wheel)
  return()
endif()

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Where the Python package goes, relative to the prefix: Debian's own
# packages under /usr use lib/python3/dist-packages; under any other prefix
# Debian's python3 searches lib/python3.X/dist-packages (/usr/local does).
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(lc_pydir_default "lib/python3/dist-packages")
else()
  set(lc_pyver "")
  if(LC_PYTHON)
    execute_process(COMMAND ${LC_PYTHON} -c "import sys; print('%d.%d' % sys.version_info[:2])"
      OUTPUT_VARIABLE lc_pyver OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
  if(lc_pyver)
    set(lc_pydir_default "lib/python${lc_pyver}/dist-packages")
  else()
    set(lc_pydir_default "lib/python3/dist-packages")
  endif()
endif()
# Recomputed at each configure (it follows CMAKE_INSTALL_PREFIX), unless
# given: -DLC_INSTALL_PYTHONDIR=lib/python3/dist-packages.
if(NOT DEFINED LC_INSTALL_PYTHONDIR)
  set(LC_INSTALL_PYTHONDIR "${lc_pydir_default}")
endif()

# The library, its headers and its exported target.
install(TARGETS layercake EXPORT layercakeTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/layercake.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/layercake DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT dev FILES_MATCHING PATTERN "*.h")
install(TARGETS layercake_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)

# CMake package: find_package(layercake) gives layercake::layercake.
set(lc_cmakedir ${CMAKE_INSTALL_LIBDIR}/cmake/layercake)
install(EXPORT layercakeTargets NAMESPACE layercake:: DESTINATION ${lc_cmakedir} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/layercakeConfig.cmake.in
  ${PROJECT_BINARY_DIR}/layercakeConfig.cmake INSTALL_DESTINATION ${lc_cmakedir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/layercakeConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/layercakeConfig.cmake ${PROJECT_BINARY_DIR}/layercakeConfigVersion.cmake
  DESTINATION ${lc_cmakedir} COMPONENT dev)

# pkg-config: the prefix is found from the .pc file's own place, so the
# tree may be installed under any --prefix or DESTDIR, or moved.
file(RELATIVE_PATH lc_pc_up /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" lc_pc_up "${lc_pc_up}")
# Outside /usr the loader does not search the prefix's library folder (not
# even /usr/local/lib before an ldconfig), so a program linked with
# `pkg-config --libs` gets an rpath to it (${libdir}: where the .pc is now).
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(lc_pc_rpath "")
else()
  set(lc_pc_rpath " -Wl,-rpath,\${libdir}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/layercake.pc.in ${PROJECT_BINARY_DIR}/layercake.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/layercake.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT dev)

# The Python package, and _paths.py: the installed library relative to the
# package, so that `import layercake` from the prefix loads the prefix's
# library (not a build tree's, not whatever the loader finds first).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/layercake DESTINATION ${LC_INSTALL_PYTHONDIR}
  COMPONENT python FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
file(RELATIVE_PATH lc_py_to_lib /${LC_INSTALL_PYTHONDIR}/layercake /${CMAKE_INSTALL_LIBDIR})
file(WRITE ${PROJECT_BINARY_DIR}/python/_paths.py
  "\"\"\"Written by the install (cmake/install.cmake): where the installed library is.\"\"\"\n"
  "import os\n\n"
  "LIBRARY = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),\n"
  "                                        \"${lc_py_to_lib}\", \"liblayercake.so.${PROJECT_VERSION_MAJOR}\"))\n")
install(FILES ${PROJECT_BINARY_DIR}/python/_paths.py DESTINATION ${LC_INSTALL_PYTHONDIR}/layercake
  COMPONENT python)

# cpack -G DEB: one package with everything above.
set(CPACK_PACKAGE_NAME layercake)
set(CPACK_PACKAGE_VENDOR "layercake")
set(CPACK_PACKAGE_CONTACT "layercake maintainers <layercake@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Layer-wise KV-cache streaming from LLM prefill to decode")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
# The library's dependencies from its ELF (dpkg-shlibdeps), plus Python
# for the package (numpy is optional to it).
find_program(LC_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(LC_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
endif()
set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3 (>= 3.9)")
# UCX is opened at run time (LC_UCX_DLOPEN): ucx:// wants libucx0.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3-numpy, python3-torch, libucx0")
include(CPack)
