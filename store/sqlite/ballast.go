package sqlite

import (
	"sync"

	"modernc.org/libc"
)

// pinAllocatorPages works around allocator thrash in the pure-Go SQLite
// (modernc.org/libc): its malloc carves each size class out of 64 KiB
// mmap'ed pages and munmaps a page as soon as its last slot is freed. A
// b-tree rebalance or a statement journal allocates and frees a scratch
// buffer of a class nothing else holds, so every page split cost an mmap
// and a munmap; profiles of a burst of closes spent a third of the
// close path's CPU (half with webhooks) in those two system calls. One
// slot of each class, allocated once per process and never freed, keeps
// one page of every class mapped, so such buffers reuse it. It costs 64
// KiB per class (under 1 MiB).
var pinAllocatorPages = sync.OnceFunc(func() {
	tls := libc.NewTLS()
	for size := 16; size <= 16<<10; size *= 2 {
		libc.Xmalloc(tls, libc.Tsize_t(size))
	}
})
