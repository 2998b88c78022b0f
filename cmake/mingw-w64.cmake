# Cross-compiling for 64-bit Windows with mingw-w64 (Debian: gcc-mingw-w64-x86-64-posix, whose
# winpthreads gives the pthreads that src/platform/platform.h keeps on Windows):
#   cmake -S . -B build-win -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64.cmake -DVAE_CUDA=OFF -DVAE_MEDIA=OFF
# The tests run under Wine (CMAKE_CROSSCOMPILING_EMULATOR); scripts/test_windows.sh does it all,
# with cJSON and libpng built for the target into VAE_WIN_DEPS.
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(VAE_MINGW_TRIPLE x86_64-w64-mingw32)

# the posix threading flavour (the win32 one has no winpthreads, hence no <pthread.h> threads)
find_program(CMAKE_C_COMPILER NAMES ${VAE_MINGW_TRIPLE}-gcc-posix ${VAE_MINGW_TRIPLE}-gcc REQUIRED)
find_program(CMAKE_CXX_COMPILER NAMES ${VAE_MINGW_TRIPLE}-g++-posix ${VAE_MINGW_TRIPLE}-g++)
find_program(CMAKE_RC_COMPILER NAMES ${VAE_MINGW_TRIPLE}-windres)

set(VAE_WIN_DEPS "" CACHE PATH "prefix of the target's cJSON and libpng (scripts/test_windows.sh)")
set(CMAKE_FIND_ROOT_PATH /usr/${VAE_MINGW_TRIPLE} ${VAE_WIN_DEPS})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

find_program(VAE_WINE NAMES wine64 wine)
if(VAE_WINE)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${VAE_WINE})
endif()
