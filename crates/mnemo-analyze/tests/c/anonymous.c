/* Anonymous records are named after the member they are the type of. */
struct stream {
    int kind;
    union {
        struct {
            int fd;
            long offset;
        } file;
        struct {
            char *buf;
        } mem;
    } io;
};

void open_file(struct stream *s, int fd)
{
    s->io.file.fd = fd;
}
