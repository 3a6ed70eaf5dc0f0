export const meta = {name: 'returned-function', slug: 'returned-function', version: '1'};
export default async function (args, g) {
  return {done: true, next: () => 1};
}
