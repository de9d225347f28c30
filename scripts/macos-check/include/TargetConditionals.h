/* A stand-in for the macOS SDK's header, for `scripts/check-macos` only: C dependencies (ring)
   are compiled, never linked, while the workspace is type-checked for aarch64-apple-darwin. */
#pragma once
#define TARGET_OS_MAC 1
#define TARGET_OS_OSX 1
#define TARGET_OS_IPHONE 0
#define TARGET_OS_IOS 0
#define TARGET_OS_TV 0
#define TARGET_OS_WATCH 0
#define TARGET_OS_SIMULATOR 0
