/* The C ABI entry points of the flashattn library linked into flashattn._C, as a table of
 * function pointers that _C hands out (_C.library_table() returns its address). The optional
 * torch extension (python/torch_ext) calls the library through it, so the wheel carries one
 * copy of the library (its CUDA kernels are large) and the extension needs no symbol of _C
 * to be exported, nor _C's path. Plain C: both sides see the same layout, and `size` and
 * `version` let the extension refuse a table it does not know. */
#ifndef FLASHATTN_PYTHON_LIBRARY_TABLE_H_
#define FLASHATTN_PYTHON_LIBRARY_TABLE_H_

#include <stdint.h>

#include "flashattn/flashattn.h"

#define FLASHATTN_LIBRARY_TABLE_VERSION 1

typedef struct flashattn_library_table {
  uint32_t size;    /* sizeof(flashattn_library_table) */
  uint32_t version; /* FLASHATTN_LIBRARY_TABLE_VERSION */
  void (*forward_args_init)(fa_forward_args* args);
  void (*backward_args_init)(fa_backward_args* args);
  void (*launch_init)(fa_launch* launch);
  fa_status (*forward)(const fa_forward_args* args, const fa_launch* launch);
  fa_status (*backward)(const fa_backward_args* args, const fa_launch* launch);
  const char* (*last_error_message)(void);
} flashattn_library_table;

#endif /* FLASHATTN_PYTHON_LIBRARY_TABLE_H_ */
