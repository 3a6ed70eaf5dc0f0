export const meta = {name: 'no-default-export', slug: 'no-default-export', version: '1'};
export function main(args, g) {
  return 1;
}
