/* A stand-in for the SDK's <assert.h>, for `scripts/check-macos` only (see TargetConditionals.h). */
#pragma once
#define assert(e) ((void)0)
