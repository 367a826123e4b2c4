/* embed.S — embeds the default corpus (data/corpus.txt) and the default job
 * (etc/shardrun.yaml) into the binary with .incbin, so `shardrun train` works
 * with no files at all.  The assembler finds both through -I flags set in
 * Makefile.am. */
    .section .rodata
    .balign 16
    .globl sr_corpus_data
    .type sr_corpus_data, @object
sr_corpus_data:
    .incbin "corpus.txt"
sr_corpus_end:
    .byte 0
    .balign 8
    .globl sr_corpus_size
    .type sr_corpus_size, @object
sr_corpus_size:
    .quad sr_corpus_end - sr_corpus_data

    .balign 16
    .globl sr_default_job
    .type sr_default_job, @object
sr_default_job:
    .incbin "shardrun.yaml"
sr_default_job_end:
    .byte 0
    .balign 8
    .globl sr_default_job_len
    .type sr_default_job_len, @object
sr_default_job_len:
    .quad sr_default_job_end - sr_default_job

    .section .note.GNU-stack,"",@progbits
