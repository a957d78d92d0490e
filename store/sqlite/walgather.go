package sqlite

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"unsafe"

	"modernc.org/libc"
	lib "modernc.org/sqlite/lib"
)

// The writer's WAL is written through gatherVFS, the default VFS with one
// change to WAL files: SQLite writes each frame as two writes (its 24-byte
// header, then the page), and nothing else touches the file until the
// commit's sync, so the frames are gathered in memory and written at once
// (in chunks of gatherChunk) before that sync, and before any read,
// truncate, size or close of the file. A commit of 20 frames was 40 pwrite
// calls and is one (docs/benchmarks/sqlite-rate.md).
//
// What makes it safe: an answered write is one whose commit's sync
// returned, and the gathered frames are written before that sync, so a
// committed transaction is on disk as before. SQLite publishes a commit's
// frames to other connections (the wal-index) after that sync, so a reader
// never looks for a frame still in memory. That order holds only with
// synchronous = FULL, which the writer sets (Open); with NORMAL a commit
// does not sync and its frames would be published unwritten, so gatherVFS
// is only for a FULL connection. Frames lost from memory by a crash belong
// to a transaction that did not commit, which WAL recovery drops anyway.

// gatherVFS is the name the writer opens its database with (?vfs=).
const gatherVFS = "hourglass-walgather"

// gatherChunk is the largest write handed to the default VFS: its unixWrite
// keeps the low 17 bits of a write's length (it never writes more than a
// page), so a larger one would be cut short. 31 pages of 4 KiB.
const gatherChunk = 0x1f000

// gatherCap bounds the memory a WAL file gathers before it writes.
const gatherCap = 1 << 21

// gather holds one WAL file's frames written since its last flush: a run of
// contiguous bytes from off. Not safe for concurrent use: SQLite calls a
// file's methods under its connection's mutex.
type gather struct {
	off int64
	buf []byte
}

// add records p written at off, first flushing what is held when p does not
// follow it or would take it past gatherCap; a write larger than gatherCap
// is flushed alone.
func (g *gather) add(p []byte, off int64, write func(p []byte, off int64) error) error {
	if len(g.buf) > 0 && (g.off+int64(len(g.buf)) != off || len(g.buf)+len(p) > gatherCap) {
		if err := g.flush(write); err != nil {
			return err
		}
	}
	if len(p) > gatherCap {
		return writeChunks(p, off, write)
	}
	if len(g.buf) == 0 {
		g.off = off
	}
	g.buf = append(g.buf, p...)
	return nil
}

// flush writes what is held, in chunks of at most gatherChunk, and forgets
// it whatever the result: SQLite treats a failed write as a failed
// transaction and writes the frames again.
func (g *gather) flush(write func(p []byte, off int64) error) error {
	err := writeChunks(g.buf, g.off, write)
	g.buf = g.buf[:0]
	return err
}

func writeChunks(p []byte, off int64, write func(p []byte, off int64) error) error {
	for len(p) > 0 {
		n := min(len(p), gatherChunk)
		if err := write(p[:n], off); err != nil {
			return err
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// gatherState is the registration of gatherVFS and the WAL files it has
// open. SQLite's VFS registry is process-wide, so this is too; it holds no
// configuration.
var gatherState struct {
	once       sync.Once
	err        error
	base       uintptr                  // the default sqlite3_vfs
	methods    lib.Tsqlite3_io_methods1 // the default VFS's WAL file methods
	methodsPtr uintptr                  // … and their address
	ours       uintptr                  // gatherVFS's WAL file methods (C memory)
	methOnce   sync.Once
	files      sync.Map // sqlite3_file pointer → *walFile
}

// walFile is one open WAL file's gathered frames, held in C memory so that
// they are written without another copy.
type walFile struct {
	name string
	g    gather
	mem  uintptr // gatherCap bytes
}

// rcError is a SQLite result code as an error, to carry one through gather.
type rcError int32

func (e rcError) Error() string { return "sqlite: result code " + strconv.Itoa(int(e)) }

// code is err's result code (SQLITE_OK for nil).
func code(err error) int32 {
	if e, ok := err.(rcError); ok {
		return int32(e)
	}
	if err != nil {
		return lib.SQLITE_IOERR_WRITE
	}
	return lib.SQLITE_OK
}

// cptr is the C address p as a Go pointer (C memory, which the Go
// collector does not move or free).
func cptr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// cfunc is f's address as a C function pointer; f must be a top-level
// function.
func cfunc[T any](f T) uintptr { return *(*uintptr)(unsafe.Pointer(&struct{ f T }{f})) }

// callC is the C function pointer fp as a Go function of type T.
func callC[T any](fp uintptr) T { return *(*T)(unsafe.Pointer(&struct{ uintptr }{fp})) }

type (
	vfsOpen   = func(*libc.TLS, uintptr, uintptr, uintptr, int32, uintptr) int32
	fileIO    = func(*libc.TLS, uintptr, uintptr, int32, int64) int32 // xRead, xWrite
	fileSync  = func(*libc.TLS, uintptr, int32) int32
	fileTrunc = func(*libc.TLS, uintptr, int64) int32
	fileSize  = func(*libc.TLS, uintptr, uintptr) int32
	fileClose = func(*libc.TLS, uintptr) int32
)

// registerGatherVFS registers gatherVFS once per process.
func registerGatherVFS() error {
	st := &gatherState
	st.once.Do(func() {
		tls := libc.NewTLS()
		defer tls.Close()
		st.base = lib.Xsqlite3_vfs_find(tls, 0)
		p := libc.Xmalloc(tls, uint64(unsafe.Sizeof(lib.Tsqlite3_vfs1{})))
		name, err := libc.CString(gatherVFS)
		if st.base == 0 || p == 0 || err != nil {
			st.err = errors.New("sqlite: register the WAL-gathering VFS: no default VFS or no memory")
			return
		}
		v := (*lib.Tsqlite3_vfs1)(cptr(p))
		*v = *(*lib.Tsqlite3_vfs1)(cptr(st.base))
		v.FpNext, v.FzName, v.FxOpen = 0, name, cfunc(gatherOpen)
		if rc := lib.Xsqlite3_vfs_register(tls, p, 0); rc != lib.SQLITE_OK {
			st.err = fmt.Errorf("sqlite: register the WAL-gathering VFS: %w", rcError(rc))
		}
	})
	return st.err
}

// gatherOpen is xOpen: the default VFS's, and a WAL file's methods swapped
// for the gathering ones.
func gatherOpen(tls *libc.TLS, _, zName, pFile uintptr, flags int32, pOutFlags uintptr) int32 {
	st := &gatherState
	base := (*lib.Tsqlite3_vfs1)(cptr(st.base))
	rc := callC[vfsOpen](base.FxOpen)(tls, st.base, zName, pFile, flags, pOutFlags)
	f := (*lib.Tsqlite3_file1)(cptr(pFile))
	if rc != lib.SQLITE_OK || flags&lib.SQLITE_OPEN_WAL == 0 || f.FpMethods == 0 {
		return rc
	}
	st.methOnce.Do(func() {
		st.methodsPtr = f.FpMethods
		st.methods = *(*lib.Tsqlite3_io_methods1)(cptr(f.FpMethods))
		ours := st.methods
		ours.FxWrite, ours.FxRead, ours.FxSync = cfunc(gatherWrite), cfunc(gatherRead), cfunc(gatherSync)
		ours.FxTruncate, ours.FxFileSize, ours.FxClose = cfunc(gatherTruncate), cfunc(gatherFileSize), cfunc(gatherClose)
		if p := libc.Xmalloc(tls, uint64(unsafe.Sizeof(ours))); p != 0 {
			*(*lib.Tsqlite3_io_methods1)(cptr(p)) = ours
			st.ours = p
		}
	})
	if st.ours == 0 || f.FpMethods != st.methodsPtr {
		return rc // not the kind of file the first WAL was: left as it is
	}
	mem := libc.Xmalloc(tls, gatherCap)
	if mem == 0 {
		return rc // no memory to gather in: written frame by frame
	}
	st.files.Store(pFile, &walFile{name: libc.GoString(zName), g: gather{buf: unsafe.Slice((*byte)(cptr(mem)), gatherCap)[:0]}, mem: mem})
	f.FpMethods = st.ours
	return rc
}

func walFileOf(pFile uintptr) *walFile {
	v, _ := gatherState.files.Load(pFile)
	return v.(*walFile)
}

// baseWrite is the default VFS's xWrite of p (in C memory) at off.
func baseWrite(tls *libc.TLS, pFile uintptr) func(p []byte, off int64) error {
	return func(p []byte, off int64) error {
		rc := callC[fileIO](gatherState.methods.FxWrite)(tls, pFile, uintptr(unsafe.Pointer(unsafe.SliceData(p))), int32(len(p)), off)
		if rc != lib.SQLITE_OK {
			return rcError(rc)
		}
		return nil
	}
}

// gatherFlush writes pFile's gathered frames.
func gatherFlush(tls *libc.TLS, pFile uintptr) int32 {
	return code(walFileOf(pFile).g.flush(baseWrite(tls, pFile)))
}

func gatherWrite(tls *libc.TLS, pFile, zBuf uintptr, iAmt int32, iOfst int64) int32 {
	return code(walFileOf(pFile).g.add(unsafe.Slice((*byte)(cptr(zBuf)), iAmt), iOfst, baseWrite(tls, pFile)))
}

func gatherRead(tls *libc.TLS, pFile, zBuf uintptr, iAmt int32, iOfst int64) int32 {
	if rc := gatherFlush(tls, pFile); rc != lib.SQLITE_OK {
		return rc
	}
	return callC[fileIO](gatherState.methods.FxRead)(tls, pFile, zBuf, iAmt, iOfst)
}

func gatherSync(tls *libc.TLS, pFile uintptr, flags int32) int32 {
	if rc := gatherFlush(tls, pFile); rc != lib.SQLITE_OK {
		return rc
	}
	return callC[fileSync](gatherState.methods.FxSync)(tls, pFile, flags)
}

func gatherTruncate(tls *libc.TLS, pFile uintptr, size int64) int32 {
	if rc := gatherFlush(tls, pFile); rc != lib.SQLITE_OK {
		return rc
	}
	return callC[fileTrunc](gatherState.methods.FxTruncate)(tls, pFile, size)
}

func gatherFileSize(tls *libc.TLS, pFile, pSize uintptr) int32 {
	if rc := gatherFlush(tls, pFile); rc != lib.SQLITE_OK {
		return rc
	}
	return callC[fileSize](gatherState.methods.FxFileSize)(tls, pFile, pSize)
}

func gatherClose(tls *libc.TLS, pFile uintptr) int32 {
	wf := walFileOf(pFile)
	rc := code(wf.g.flush(baseWrite(tls, pFile)))
	gatherState.files.Delete(pFile)
	if rc2 := callC[fileClose](gatherState.methods.FxClose)(tls, pFile); rc == lib.SQLITE_OK {
		rc = rc2
	}
	libc.Xfree(tls, wf.mem)
	return rc
}
