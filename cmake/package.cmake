# `cmake --install build --prefix P` gives P/bin/titan and P/share/titan/;
# `make package` (CPack) wraps the same tree in a .deb whose runtime
# dependencies dpkg-shlibdeps reads off the binary.
include(GNUInstallDirs)
install(TARGETS titan_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# Libraries outside the system paths (the CUDA toolkit's) stay findable once installed.
set_target_properties(titan_cli PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME titan)
set(CPACK_PACKAGE_VENDOR "titan.cpp")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "C++-native pre-training and fine-tuning of large language models")
set(CPACK_PACKAGE_INSTALL_DIRECTORY titan)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "titan.cpp developers")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# mpirun for multi-process jobs; the fortunes corpus for `titan data prepare`'s
# default input; PyTorch for the `titan bench train` peer.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "openmpi-bin, fortunes")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3-torch")
include(CPack)
