_foliko_completion() {
    local IFS=$'\n'
    local response

    response=$(env COMP_WORDS="${COMP_WORDS[*]}" COMP_CWORD=$COMP_CWORD _FOLIKO_COMPLETE=bash_complete $1)

    for completion in $response; do
        IFS=',' read -r type value <<< "$completion"

        if [[ $type == 'dir' ]]; then
            COMPREPLY=()
            compopt -o dirnames
        elif [[ $type == 'file' ]]; then
            COMPREPLY=()
            compopt -o default
        elif [[ $type == 'plain' ]]; then
            printf -v value '%q' "$value"
            COMPREPLY+=("$value")
        fi
    done

    return 0
}

_foliko_completion_setup() {
    complete -o nosort -F _foliko_completion foliko
}

_foliko_completion_setup;
