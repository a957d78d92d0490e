package mysql

// maxLastError bounds the stored error text of a failed attempt (a BLOB).
const maxLastError = 60000
