package sqlite

import (
	"sync"

	"modernc.org/libc"
)

// pinAllocatorPages works around allocator thrash in the pure-Go SQLite
// (modernc.org/libc): its malloc carves each size class out of 64 KiB
// mmap'ed pages and munmaps a page as soon as its last slot is freed.
//
// A b-tree rebalance or a statement journal allocates and frees a scratch
// buffer of a class nothing else holds, so every page split cost an mmap
// and a munmap; profiles of a burst of closes spent a third of the close
// path's CPU (half with webhooks) in those two system calls. One slot of
// each class, allocated once per process and never freed, keeps one page of
// every class mapped, so such buffers reuse it (under 1 MiB).
//
// A read connection's page cache is emptied whenever its read transaction
// finds that the writer committed since its last one (WAL mode), which
// under a stream of writes is every read: the cache's entries (4 KiB pages
// with their headers, the 8 KiB class) are freed and allocated again per
// read, and each allocator page they emptied was munmapped. Webhook
// delivery, two reads per attempt while closes commit, spent half its CPU
// there. pcachePinnedPages pages of that class keep one slot each for the
// process's life, so the others are reused instead.
//
// One pinned slot is not enough for the classes of 1 KiB to 16 KiB, whose
// allocator pages hold 3 to 63 slots: long-lived allocations (a cached
// statement's program, a connection's buffers) fill the pinned page, and the
// next page of the class was mapped and unmapped again, mostly under b-tree
// rebalances. A node under `hourglass bench` at 5,000 orders/s made about
// 960 mmaps a second (each with two munmaps to align it, and one to free
// it); with classPinnedPages pages of each of those classes, one in 3 s.
var pinAllocatorPages = sync.OnceFunc(func() {
	tls := libc.NewTLS()
	for size := 16; size <= 16<<10; size *= 2 {
		if size >= 1<<10 {
			pinPages(tls, size, classPinnedPages)
		} else {
			libc.Xmalloc(tls, libc.Tsize_t(size))
		}
	}
	pinPages(tls, pcacheEntrySize, pcachePinnedPages)
})

const (
	// pcacheEntrySize is a page-cache entry's allocation for 4 KiB pages:
	// the page, the pager's and pcache1's headers (about 4.3 KiB).
	pcacheEntrySize = 4096 + 512
	// pcachePinnedPages allocator pages of 64 KiB, 7 entries each (8 MiB of
	// address space; the entries are the caches' own memory): room for the
	// writer's cache (2 MiB by default) and the read connections' (256 KiB
	// each, see Open).
	pcachePinnedPages = 128
	// classPinnedPages pages of each class from 1 KiB to 16 KiB (2.5 MiB
	// of address space at most, of which a few pages each are touched).
	classPinnedPages = 8
	allocatorPage    = 64 << 10
)

// pinPages keeps n allocator pages of size's class mapped: it allocates
// slots of that size until n distinct pages hold some, then frees all but
// the first slot of each page. The freed slots are reused by later
// allocations of the class; a page with a pinned slot is never unmapped.
func pinPages(tls *libc.TLS, size, n int) {
	var slots []uintptr
	pages := map[uintptr]bool{}
	for len(pages) < n {
		p := libc.Xmalloc(tls, libc.Tsize_t(size))
		if p == 0 {
			break // out of memory: pin what we have
		}
		slots = append(slots, p)
		pages[p&^(allocatorPage-1)] = true
	}
	kept := map[uintptr]bool{}
	for _, p := range slots {
		pg := p &^ (allocatorPage - 1)
		if !kept[pg] {
			kept[pg] = true
			continue
		}
		libc.Xfree(tls, p)
	}
}
